"""The command-line front of the training scripts: flat argument dataclasses generated from the declaration
(``arguments.py``, ``diffcse_arguments.py``, ``config_file.py``, ``cli_help.py``), the checks before anything loads
(``preflight.py``, ``launch.py``), the scripts' train-and-export pipeline (``pipeline.py``) and the run summary
(``summary.py``). It imports the training core (``trainers/``); the core never imports it (docs/architecture.md)."""
