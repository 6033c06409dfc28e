#!/usr/bin/env python
"""DiffCSE (Chuang et al., NAACL 2022): not implemented yet.

Tracked in the DiffCSE issue: conditional replaced-token detection on stock transformers, built on the shared
base of ``models/``. Until then this script refuses to run instead of training something else silently.
"""
import sys

if __name__ == "__main__":
    sys.exit("run_diffcse.py: DiffCSE is not implemented yet (see the DiffCSE issue); use run_unsup.py for "
             "SimCSE / ESimCSE / SimCSE++ / S-SimCSE.")
