"""Citation registry: every theorem a report relies on, by key, with a BibTeX entry.

Reports carry citation keys; ``bibtex(keys)`` renders the entries. Entries name the paper and the
arXiv identifier; where the source text we ship does not give the authors (dp-maml.txt) the entry
says so instead of guessing.
"""

from __future__ import annotations

from typing import Dict, Iterable

__all__ = ["CITATIONS", "bibtex", "short_reference"]

CITATIONS: Dict[str, Dict[str, str]] = {
    "mironov2017renyi": {
        "type": "inproceedings",
        "title": "R{\\'e}nyi Differential Privacy",
        "author": "Mironov, Ilya",
        "booktitle": "IEEE Computer Security Foundations Symposium (CSF)",
        "year": "2017",
        "eprint": "1702.07476",
    },
    "fan2018image": {
        "type": "inproceedings",
        "title": "Image Pixelization with Differential Privacy",
        "author": "Fan, Liyue",
        "booktitle": "Data and Applications Security and Privacy XXXII (DBSec), LNCS 10980",
        "year": "2018",
    },
    "mironov2019sampled": {
        "type": "misc",
        "title": "R{\\'e}nyi Differential Privacy of the Sampled Gaussian Mechanism",
        "author": "Mironov, Ilya and Talwar, Kunal and Zhang, Li",
        "year": "2019",
        "eprint": "1908.10530",
    },
    "wang2019subsampled": {
        "type": "inproceedings",
        "title": "Subsampled R{\\'e}nyi Differential Privacy and Analytical Moments Accountant",
        "author": "Wang, Yu-Xiang and Balle, Borja and Kasiviswanathan, Shiva Prasad",
        "booktitle": "International Conference on Artificial Intelligence and Statistics (AISTATS)",
        "year": "2019",
        "eprint": "1808.00087",
    },
    "balle2018privacy": {
        "type": "inproceedings",
        "title": "Privacy Amplification by Subsampling: Tight Analyses via Couplings and Divergences",
        "author": "Balle, Borja and Barthe, Gilles and Gaboardi, Marco",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2018",
        "eprint": "1807.01647",
    },
    "canonne2020discrete": {
        "type": "inproceedings",
        "title": "The Discrete Gaussian for Differential Privacy",
        "author": "Canonne, Cl{\\'e}ment L. and Kamath, Gautam and Steinke, Thomas",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2020",
        "eprint": "2004.00010",
    },
    "asoodeh2021three": {
        "type": "article",
        "title": "Three Variants of Differential Privacy: Lossless Conversion and Applications",
        "author": "Asoodeh, Shahab and Liao, Jiachun and Calmon, Flavio P. and Kosut, Oliver and Sankar, Lalitha",
        "journal": "IEEE Journal on Selected Areas in Information Theory",
        "year": "2021",
        "eprint": "2008.06529",
    },
    "bretagnolle1979estimation": {
        "type": "article",
        "title": "Estimation des densit{\\'e}s: risque minimax",
        "author": "Bretagnolle, Jean and Huber, Catherine",
        "journal": "Zeitschrift f{\\\"u}r Wahrscheinlichkeitstheorie und verwandte Gebiete",
        "volume": "47",
        "pages": "119--137",
        "year": "1979",
    },
    "dong2022gaussian": {
        "type": "article",
        "title": "Gaussian Differential Privacy",
        "author": "Dong, Jinshuo and Roth, Aaron and Su, Weijie J.",
        "journal": "Journal of the Royal Statistical Society Series B: Statistical Methodology",
        "volume": "84",
        "number": "1",
        "year": "2022",
        "eprint": "1905.02383",
    },
    "choquette2023amplified": {
        "type": "inproceedings",
        "title": "(Amplified) Banded Matrix Factorization: A unified approach to private training",
        "author": "Choquette-Choo, Christopher A. and Ganesh, Arun and McKenna, Ryan and McMahan, H. Brendan and "
                  "Rush, Keith and Thakurta, Abhradeep and Xu, Zheng",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2023",
        "eprint": "2306.08153",
    },
    "denisov2022improved": {
        "type": "inproceedings",
        "title": "Improved Differential Privacy for SGD via Optimal Private Linear Operators on Adaptive Streams",
        "author": "Denisov, Sergey and McMahan, H. Brendan and Rush, Keith and Smith, Adam and Thakurta, Abhradeep",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2022",
        "eprint": "2202.08312",
    },
    "schuchardt2024unified": {
        "type": "inproceedings",
        "title": "Unified Mechanism-Specific Amplification by Subsampling and Group Privacy Amplification",
        "author": "Schuchardt, Jan and Stoian, Mihail and Kosmala, Arthur and G{\\\"u}nnemann, Stephan",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2024",
        "eprint": "2403.04867",
    },
    "zhu2022optimal": {
        "type": "inproceedings",
        "title": "Optimal Accounting of Differential Privacy via Characteristic Function",
        "author": "Zhu, Yuqing and Dong, Jinshuo and Wang, Yu-Xiang",
        "booktitle": "International Conference on Artificial Intelligence and Statistics (AISTATS)",
        "year": "2022",
        "eprint": "2106.08567",
    },
    "gopi2021numerical": {
        "type": "inproceedings",
        "title": "Numerical Composition of Differential Privacy",
        "author": "Gopi, Sivakanth and Lee, Yin Tat and Wutschitz, Lukas",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2021",
        "eprint": "2106.02848",
    },
    "tombs2022privacy": {
        "type": "inproceedings",
        "title": "Privacy Amplification for Episodic Training Methods",
        "author": "Tombs, Vandy and Kotevska, Olivera and Young, Steven",
        "booktitle": "CEUR Workshop Proceedings",
        "year": "2022",
    },
    "chua2024private": {
        "type": "inproceedings",
        "title": "How Private are DP-SGD Implementations?",
        "author": "Chua, Lynn and Ghazi, Badih and Kamath, Pritish and Kumar, Ravi and Manurangsi, Pasin and Sinha, Amer and Zhang, Chiyuan",
        "booktitle": "International Conference on Machine Learning (ICML)",
        "year": "2024",
        "eprint": "2403.17673",
    },
    "feldman2025random": {
        "type": "article",
        "title": "Privacy amplification by random allocation",
        "author": "Feldman, Vitaly and Shenfeld, Moshe",
        "journal": "arXiv preprint",
        "year": "2025",
        "eprint": "2502.08202",
    },
    "chua2025balls": {
        "type": "article",
        "title": "Balls-and-Bins Sampling for DP-SGD",
        "author": "Chua, Lynn and Ghazi, Badih and Harrison, Charlie and Kamath, Pritish and Kumar, Ravi and Leeman, Ethan and Manurangsi, Pasin and Sinha, Amer and Zhang, Chiyuan",
        "journal": "arXiv preprint",
        "year": "2025",
        "eprint": "2412.16802",
    },
    "andrew2021differentially": {
        "type": "inproceedings",
        "title": "Differentially Private Learning with Adaptive Clipping",
        "author": "Andrew, Galen and Thakkar, Om and McMahan, H. Brendan and Ramaswamy, Swaroop",
        "booktitle": "Advances in Neural Information Processing Systems (NeurIPS)",
        "year": "2021",
        "eprint": "1905.03871",
    },
    "doroshenko2022connect": {
        "type": "article",
        "title": "Connect the Dots: Tighter Discrete Approximations of Privacy Loss Distributions",
        "author": "Doroshenko, Vadym and Ghazi, Badih and Kamath, Pritish and Kumar, Ravi and Manurangsi, Pasin",
        "journal": "Proceedings on Privacy Enhancing Technologies",
        "volume": "2022",
        "number": "4",
        "year": "2022",
        "eprint": "2207.04380",
    },
    "higham2002accuracy": {
        "type": "misc",
        "title": "Accuracy and Stability of Numerical Algorithms (2nd edition, SIAM), Thm 24.2",
        "author": "Higham, Nicholas J.",
        "year": "2002",
        "doi": "10.1137/1.9780898718027",
    },
    "bennett1962probability": {
        "type": "article",
        "title": "Probability Inequalities for the Sum of Independent Random Variables",
        "author": "Bennett, George",
        "journal": "Journal of the American Statistical Association",
        "volume": "57",
        "number": "297",
        "pages": "33--45",
        "year": "1962",
    },
    "abadi2016deep": {
        "type": "inproceedings",
        "title": "Deep Learning with Differential Privacy",
        "author": "Abadi, Martin and Chu, Andy and Goodfellow, Ian and McMahan, H. Brendan and Mironov, Ilya and Talwar, Kunal and Zhang, Li",
        "booktitle": "ACM Conference on Computer and Communications Security (CCS)",
        "year": "2016",
        "eprint": "1607.00133",
    },
    "dpmaml": {
        "type": "misc",
        "title": "Meta-Learning with Differential Privacy",
        "author": "{Anonymous}",
        "note": "Anonymous manuscript in the ACM conference template (authors, venue and year withheld in the copy "
                "metadp analyses, shared/papers/dp-maml.txt); DP-MAML: task-level (Alg. 1) and sample-level (Alg. 2)",
        "year": "n.d.",
    },
    "wang2022squeezing": {
        "type": "inproceedings",
        "title": "Squeezing More Utility via Adaptive Clipping on Differentially Private Gradients in Federated Meta-Learning",
        "author": "Wang, Ning and Xiao, Yang and Chen, Yimin and Zhang, Ning and Lou, Wenjing and Hou, Y. Thomas",
        "booktitle": "Annual Computer Security Applications Conference (ACSAC)",
        "year": "2022",
        "doi": "10.1145/3564625.3564652",
        "note": "DP-FedMeta (DP-AGR, DP-AGRLR)",
    },
    "li2020differentially": {
        "type": "inproceedings",
        "title": "Differentially Private Meta-Learning",
        "author": "Li, Jeffrey and Khodak, Mikhail and Caldas, Sebastian and Talwalkar, Ameet",
        "booktitle": "International Conference on Learning Representations (ICLR)",
        "year": "2020",
        "eprint": "1909.05830",
    },
}


def bibtex(keys: Iterable[str]) -> str:
    """BibTeX entries for ``keys`` (in order, duplicates dropped).

    Raises:
        ValueError: for an unknown key.
    """
    out = []
    for key in dict.fromkeys(keys):
        if key not in CITATIONS:
            raise ValueError(f"unknown citation key {key!r}; known: {', '.join(sorted(CITATIONS))}")
        fields = dict(CITATIONS[key])
        kind = fields.pop("type")
        if "eprint" in fields:
            fields["archivePrefix"] = "arXiv"
        body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields.items())
        out.append(f"@{kind}{{{key},\n{body}\n}}")
    return "\n\n".join(out)


def short_reference(key: str) -> str:
    """'Mironov, Talwar & Zhang 2019, <title> (arXiv:1908.10530)' for a citation key."""
    entry = CITATIONS[key]
    names = [a.split(",")[0].strip("{} ") for a in entry["author"].split(" and ")]
    authors = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " & " + names[-1]
    if len(names) > 3:
        authors = names[0] + " et al."
    title = entry["title"].replace("{\\'e}", "e").replace('{\\"u}', "u").replace("{", "").replace("}", "")
    arxiv = f" (arXiv:{entry['eprint']})" if "eprint" in entry else ""
    return f"{authors} {entry['year']}, {title}{arxiv}"
