"""What rank 0 writes once training ends: the held-out metrics, the ONNX export with the tokenizer,
the optional reward dump for the TypeScript parity test, and the `train` step's caper.json
sections with the model card."""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch

from ..data.prompt import MARKER, PAD_ID, SPECIAL_TOKENS, TEMPLATE
from ..model.export import manifest_inputs
from ..model.manifest import write_step
from ..model.reward_model import RewardModel
from .context import Setup
from .distributed import log
from .loop import Schedule, TrainRun
from .model_card import model_card
from .model_spec import model_record
from .objective import evaluate
from ..model.paths import shown_command, shown_path
from .train_data import Data


def final_metrics(s: Setup, model: RewardModel, data: Data, run: TrainRun) -> dict:
    metrics: dict = {"train_" + k: v for k, v in run.last.items()}
    # Root-cause clause frequencies of the training pairs: `caper eval localize` ranks clauses by
    # it for its prior baseline when no --prior file is given.
    prior: dict[str, int] = {}
    for r in data.records:
        if r["type"] == "pair" and isinstance(r.get("clause"), str):
            prior[r["clause"]] = prior.get(r["clause"], 0) + 1
    metrics["clause_prior"] = prior
    if data.val.pairs or data.val.trajs:
        metrics.update({"val_" + k: v for k, v in evaluate(model, data.val.pairs, data.val.trajs, s.device, s.a).items()})
    log(f"metrics: {json.dumps(metrics)}")
    return metrics



def export_model(s: Setup, model: RewardModel, data: Data) -> dict | None:
    """Tokenizer, ONNX export (fp32 + int8) and the optional reward dump."""
    a = s.a
    data.tok.save(s.out / "tokenizer.json")
    export_info = None
    ds = data.ds
    sample_seqs = [p.chosen for p in ds.pairs[:4]] + [p.rejected for p in ds.pairs[:4]] + [t.ids for t in ds.trajs[:4]]
    if not a.no_export:
        from ..model.export import export
        export_info = export(model.cpu(), s.out, sample_seqs)
        log(f"exported: {json.dumps(export_info)}")
    if a.dump_rewards:
        dump_rewards(model.cpu().float(), data.tok, data.records[: a.dump_count], s.max_length, a.dump_rewards,
                     terminal=a.terminal)
    return export_info


def write_manifest(s: Setup, model: RewardModel, data: Data, sch: Schedule, run: TrainRun, metrics: dict,
                   export_info: dict | None, argv) -> None:
    a, tok, train_s = s.a, data.tok, run.seconds
    manifest = {
        "name": s.out.name,
        "template": TEMPLATE,
        "marker": MARKER,
        "marker_id": tok.special_id(MARKER),
        "special_ids": {t: tok.special_id(t) for t in SPECIAL_TOKENS if t in tok._special},
        "pad_id": PAD_ID,
        "max_length": s.max_length,
        # The prompt ends in `</s>` after the last marker and the output there is the whole-query
        # verdict; absent (older models): no terminal position.
        "terminal_verdict": bool(a.terminal),
        "output_name": "rewards",
        **manifest_inputs(export_info),
        "parameters": model.parameter_count(),
        "vocab_size": tok.vocab_size,
        "data_hash": "sha256:" + data.data_sha,
        "metrics": metrics,
        "files": {"model": "model.onnx", "model_int8": "model.int8.onnx", "tokenizer": "tokenizer.json"},
        "training": {
            "preset": None if a.base else a.preset, "base": a.base and shown_path(a.base), "init": a.init and shown_path(a.init),
            **model_record(model, s.spec, run.trained_parameters), "seed": a.seed, "steps": run.steps,
            "epochs": round(run.steps / sch.steps_per_epoch, 3), "batch_size": a.batch_size, "lr": sch.lr, "loss": a.loss,
            "pref_form": a.pref_form, "reg_weight": a.reg_weight if a.loss == "pref+reg" else None,
            "train_pairs": len(data.train.pairs), "train_terminal_pairs": sum(p.terminal for p in data.train.pairs),
            "train_trajectories": len(data.train.trajs),
            "val_pairs": len(data.val.pairs), "val_trajectories": len(data.val.trajs), "skipped": data.ds.skipped,
            "records": len(data.records), "data_file": os.path.basename(a.data),
            "train_seconds": round(train_s, 1), "total_seconds": round(time.time() - s.t_start, 1),
            "sequences_per_second": round(run.sequences / train_s, 2) if train_s > 0 else 0.0,
            "tokens_per_second": round(run.tokens / train_s, 1) if train_s > 0 else 0.0,
            "records_per_second": round(run.records / train_s, 2) if train_s > 0 else 0.0,
            "cpu_share": round(run.cpu_seconds / train_s / torch.get_num_threads(), 3) if train_s > 0 else 0.0,
            "torch_threads": torch.get_num_threads(), "device": str(s.device),
            "processes": s.dist.world, "backend": s.dist.backend,
            "torch": torch.__version__, "packed_pairs": a.pack, "train_attention": a.attn,
            "command": shown_command("caper_train.scratch.train", sys.argv[1:] if argv is None else argv),
        },
        "export": export_info,
    }
    if a.no_export:
        manifest["files"] = {"tokenizer": "tokenizer.json"}
    # New weights: the other steps' outputs (selector, blame, evaluation) were fitted on the old ones.
    write_step(s.out, "train", manifest, fresh=True)
    (s.out / "MODEL_CARD.md").write_text(model_card(manifest, model))


def dump_rewards(model: RewardModel, tok, records: list[dict], max_length: int, path: str,
                 terminal: bool = False) -> None:
    """Python-side reference for the TypeScript parity test: prompts as (schema, question, units)
    plus the ids and the raw rewards at each marker."""
    from ..model.export import torch_rewards
    from ..data.prompt import PromptError, build_prompt
    rows = []
    for r in records:
        units = (list(r.get("prefix", [])) + [r["chosen"]]) if r["type"] == "pair" else [u["text"] for u in r["units"]]
        try:
            p = build_prompt(tok, r["schema"], r["question"], units, max_length, terminal=terminal)
        except PromptError:
            continue
        rows.append({"schema": r["schema"], "question": r["question"], "units": units, "ids": p.ids,
                     "markers": p.markers, "terminal": p.terminal})
    outs = torch_rewards(model.eval(), [x["ids"] for x in rows]) if rows else []
    for x, o in zip(rows, outs):
        x["rewards"] = [float(o[m]) for m in x["markers"]]
        if x["terminal"] >= 0:
            x["terminal_reward"] = float(o[x["terminal"]])
        x["all_rewards"] = [float(v) for v in o]
    Path(path).write_text(json.dumps({"max_length": max_length, "terminal_verdict": terminal, "prompts": rows}))

