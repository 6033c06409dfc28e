"""BibTeX of each method's paper and of this repository, for the model cards (:mod:`models.card`).

Sources: titles and authors as printed on the first page of the paper texts in ``../shared/papers/`` (their
``README.md`` maps files to papers); venues from that README (SimCSE's from its own first page: "Proceedings of
the 2021 Conference on Empirical Methods in Natural Language Processing, pages 6894-6910"; ESimCSE's, COLING 2022,
from ``results/paper_numbers.json``). No source here names S-SimCSE's venue or year, so its entry is ``@misc``
with its title and authors only; nothing is guessed.
"""
from __future__ import annotations

METHOD_BIBTEX: dict[str, str] = {
    "simcse": """@inproceedings{gao2021simcse,
  title = {{SimCSE}: Simple Contrastive Learning of Sentence Embeddings},
  author = {Gao, Tianyu and Yao, Xingcheng and Chen, Danqi},
  booktitle = {Proceedings of the 2021 Conference on Empirical Methods in Natural Language Processing},
  pages = {6894--6910},
  year = {2021}
}""",
    "esimcse": """@inproceedings{wu2022esimcse,
  title = {{ESimCSE}: Enhanced Sample Building Method for Contrastive Learning of Unsupervised Sentence Embedding},
  author = {Wu, Xing and Gao, Chaochen and Zang, Liangjun and Han, Jizhong and Wang, Zhongyuan and Hu, Songlin},
  booktitle = {International Conference on Computational Linguistics (COLING)},
  year = {2022}
}""",
    "simcse_pp": """@inproceedings{xu2023simcsepp,
  title = {{SimCSE++}: Improving Contrastive Learning for Sentence Embeddings from Two Perspectives},
  author = {Xu, Jiahao and Shao, Wei and Chen, Lihui and Liu, Lemao},
  booktitle = {Proceedings of the 2023 Conference on Empirical Methods in Natural Language Processing},
  year = {2023}
}""",
    "s_simcse": """@misc{zhang2021ssimcse,
  title = {{S-SimCSE}: Sampled Sub-networks for Contrastive Learning of Sentence Embedding},
  author = {Zhang, Junlei and Lan, Zhenzhong}
}""",
    "diffcse": """@inproceedings{chuang2022diffcse,
  title = {{DiffCSE}: Difference-based Contrastive Learning for Sentence Embeddings},
  author = {Chuang, Yung-Sung and Dangovski, Rumen and Luo, Hongyin and Zhang, Yang and Chang, Shiyu and
            Solja{\\v{c}}i{\\'c}, Marin and Li, Shang-Wen and Yih, Wen-tau and Kim, Yoon and Glass, James},
  booktitle = {Proceedings of the 2022 Conference of the North American Chapter of the Association for
               Computational Linguistics (NAACL)},
  year = {2022}
}""",
    # Title and authors from the paper's first page (arXiv 2201.04337, as ar5iv renders it); venue EMNLP 2022.
    "promptbert": """@inproceedings{jiang2022promptbert,
  title = {{PromptBERT}: Improving {BERT} Sentence Embeddings with Prompts},
  author = {Jiang, Ting and Jiao, Jian and Huang, Shaohan and Zhang, Zihan and Wang, Deqing and Zhuang, Fuzhen and
            Wei, Furu and Huang, Haizhen and Deng, Denvy and Zhang, Qi},
  booktitle = {Proceedings of the 2022 Conference on Empirical Methods in Natural Language Processing},
  year = {2022}
}""",
}
"""Method (``ContrastiveConfig.method``) -> its paper's BibTeX. Every method builds on SimCSE, which the cards cite
too."""

PAPER_OF: dict[str, str] = {"sup_simcse": "simcse"}
"""Methods that are a variant inside another method's paper (supervised SimCSE: the SimCSE paper)."""

REPO_BIBTEX = """@software{cse_repro,
  title = {cse-repro: unsupervised contrastive sentence embeddings (SimCSE, ESimCSE, SimCSE++, S-SimCSE, DiffCSE,
           PromptBERT)
           on the Hugging Face stack},
  note = {Reference implementation; the model was trained and exported with it}
}"""
"""This repository (it names no authors, version or address of its own; fill them in when it publishes one)."""


def citations(method: str) -> list[str]:
    """The BibTeX entries a card of ``method`` cites: the method's paper, SimCSE (every method builds on it), then
    this repository. An unknown method cites SimCSE and the repository only."""
    papers = [METHOD_BIBTEX[name] for name in dict.fromkeys((PAPER_OF.get(method, method), "simcse"))
              if name in METHOD_BIBTEX]
    return [*papers, REPO_BIBTEX]


__all__ = ["METHOD_BIBTEX", "PAPER_OF", "REPO_BIBTEX", "citations"]
