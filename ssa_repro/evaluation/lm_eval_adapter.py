"""Run LM-eval-harness (the ``lm_eval`` library, optional extra ``pip install -e '.[lm]'``) on our model.

:class:`HarnessLM` is an ``lm_eval.api.model.LM`` over :class:`~ssa_repro.evaluation.multiple_choice.TokenLM`
(``loglikelihood``, ``loglikelihood_rolling``; ``generate_until`` by greedy decoding). The tasks are
local YAMLs written by :func:`write_task_yamls` into the evaluation folder: the stock lm-eval task
definitions (prompt, choices, target, metrics, ``!function`` helpers re-exported from ``lm_eval.tasks``)
with the data source swapped for the shared JSONL (``dataset_path: json``, ``data_files`` under
``data.root``), so scores are comparable with published lm-eval numbers. The JSONL files hold one split
each; few-shot examples come from that split (``fewshot_split``; lm-eval excludes the item itself).
Nothing is downloaded: ``HF_DATASETS_OFFLINE`` / ``HF_HUB_OFFLINE`` are set while it runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from ssa_repro.evaluation.multiple_choice import TASKS, TokenLM, item_path


def available() -> bool:
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        return False
    return True


_MC = "output_type: multiple_choice\n"
_ACC = "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n"
_ACC_NORM = _ACC + "  - metric: acc_norm\n    aggregation: mean\n    higher_is_better: true\n"
_ARC = (
    _MC
    + 'doc_to_text: "Question: {{question}}\\nAnswer:"\ndoc_to_target: "{{choices.label.index(answerKey)}}"\n'
    'doc_to_choice: "{{choices.text}}"\n' + _ACC_NORM
)
BODIES = {  # stock lm-eval 0.4 fields of each task (lm_eval/tasks/...)
    "arc_easy": _ARC,
    "arc_challenge": _ARC,
    "hellaswag": _MC + 'process_docs: !function utils.hellaswag_process_docs\ndoc_to_text: "{{query}}"\n'
    'doc_to_target: "{{label}}"\ndoc_to_choice: "choices"\n' + _ACC_NORM,
    "lambada_openai": "output_type: loglikelihood\n"
    "doc_to_text: \"{{text.split(' ')[:-1]|join(' ')}}\"\ndoc_to_target: \"{{' '+text.split(' ')[-1]}}\"\n"
    "metric_list:\n  - metric: perplexity\n    aggregation: perplexity\n    higher_is_better: false\n"
    "  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n",
    "boolq": _MC + 'doc_to_text: "{{passage}}\\nQuestion: {{question}}?\\nAnswer:"\ndoc_to_target: label\n'
    'doc_to_choice: ["no", "yes"]\n' + _ACC,
    "copa": _MC
    + "doc_to_text: !function utils.copa_doc_to_text\ndoc_to_target: !function utils.copa_doc_to_target\n"
    "doc_to_choice: !function utils.copa_doc_to_choice\n" + _ACC,
    "rte": _MC + 'doc_to_text: "{{premise}}\\nQuestion: {{hypothesis}} True or False?\\nAnswer:"\n'
    "doc_to_target: label\ndoc_to_choice: ['True', 'False']\n" + _ACC,
    "wsc273": _MC + 'doc_to_text: "{{gold}}"\ndoc_to_target: "{{continuation}}"\n'
    'doc_to_choice: "{{context_options}}"\n' + _ACC,
    "piqa": _MC + 'doc_to_text: "Question: {{goal}}\\nAnswer:"\ndoc_to_target: label\n'
    'doc_to_choice: "{{[sol1, sol2]}}"\n' + _ACC_NORM,
    "winogrande": _MC
    + "doc_to_text: !function utils.winogrande_doc_to_text\ndoc_to_target: !function utils.winogrande_doc_to_target\n"
    "doc_to_choice: !function utils.winogrande_doc_to_choice\n" + _ACC,
}
UTILS = '''"""The stock lm-eval helpers the local task YAMLs need (re-exported, not re-written)."""
from lm_eval.tasks.hellaswag.utils import process_docs as hellaswag_process_docs  # noqa: F401
from lm_eval.tasks.super_glue.copa.utils import doc_to_choice as copa_doc_to_choice  # noqa: F401
from lm_eval.tasks.super_glue.copa.utils import doc_to_target as copa_doc_to_target  # noqa: F401
from lm_eval.tasks.super_glue.copa.utils import doc_to_text as copa_doc_to_text  # noqa: F401
from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_choice as winogrande_doc_to_choice  # noqa: F401
from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_target as winogrande_doc_to_target  # noqa: F401
from lm_eval.tasks.winogrande.preprocess_winogrande import doc_to_text as winogrande_doc_to_text  # noqa: F401
'''


def local_name(name: str) -> str:
    return f"ssa_{name}"


def write_task_yamls(root, folder: Path, names: list[str]) -> Path:
    """One ``ssa_<task>.yaml`` per task (data under ``root``) and ``utils.py`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "utils.py").write_text(UTILS)
    for name in names:
        path = item_path(root, name)  # DataFileError names the file if it is missing
        head = (
            f"task: {local_name(name)}\ndataset_path: json\n"
            f"dataset_kwargs:\n  data_files:\n    test: {str(path)!r}\n"
            "test_split: test\nfewshot_split: test\n"
        )
        (folder / f"{local_name(name)}.yaml").write_text(head + BODIES[name] + "metadata:\n  version: 1.0\n")
    return folder


def make_lm(token_lm: TokenLM):
    """An ``lm_eval`` LM over our model (lm_eval is imported here, so the rest never needs it)."""
    from lm_eval.api.model import LM

    class HarnessLM(LM):
        def __init__(self):
            super().__init__()
            self.t = token_lm

        def loglikelihood(self, requests, disable_tqdm: bool = False):
            return self.t.loglikelihood([tuple(r.args) for r in requests])

        def loglikelihood_rolling(self, requests, disable_tqdm: bool = False):
            return self.t.loglikelihood_rolling([r.args[0] for r in requests])

        def generate_until(self, requests, disable_tqdm: bool = False):
            out = []
            for r in requests:
                ctx, kw = r.args
                until = kw.get("until", ["\n\n"])
                until = [until] if isinstance(until, str) else list(until)
                out.append(self.t.greedy(ctx, until, int(kw.get("max_gen_toks", 64))))
            return out

    return HarnessLM()


def run_harness(token_lm: TokenLM, root, names: list[str], num_fewshot: int, limit, folder: Path) -> dict:
    """{task: {metric: (value, stderr), "n": items}} from ``lm_eval.simple_evaluate``."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    write_task_yamls(root, folder, names)
    tm = TaskManager(include_path=str(folder), include_defaults=False)
    res = lm_eval.simple_evaluate(
        model=make_lm(token_lm),
        tasks=[local_name(n) for n in names],
        num_fewshot=num_fewshot,
        limit=limit,
        task_manager=tm,
        log_samples=False,
        bootstrap_iters=100,
    )
    out = {}
    for name in names:
        r = res["results"][local_name(name)]
        metrics = {}
        for key, value in r.items():
            if "," not in key or "stderr" in key:
                continue
            metric, filt = key.split(",", 1)
            err = r.get(f"{metric}_stderr,{filt}")
            metrics[metric] = (float(value), float(err) if isinstance(err, (int, float)) else float("nan"))
        metrics["n"] = int(res.get("n-samples", {}).get(local_name(name), {}).get("effective", 0))
        out[name] = metrics
    return out


__all__ = ["available", "make_lm", "run_harness", "write_task_yamls", "TASKS"]
