"""MODEL_CARD.md of a model `caper_train.scratch.train` wrote, from its caper.json `train` sections."""
from __future__ import annotations

from ..model.reward_model import RewardModel


def lora_line(tr: dict) -> str:
    lo = tr.get("lora")
    if not lo:
        return ""
    return (f"LoRA adapters (r {lo['r']}, alpha {lo['alpha']}) on {', '.join(lo['target_modules'])}, "
            f"{lo['trainable_parameters']:,} parameters trained with the reward head, merged into the "
            "exported weights.\n- ")


def model_card(m: dict, model: RewardModel) -> str:
    tr = m["training"]
    cfg = model.backbone.config
    met = "\n".join(f"| {k} | {v:.4f} |" if isinstance(v, float) else f"| {k} | {v} |"
                    for k, v in m["metrics"].items() if not isinstance(v, dict))
    exp = m.get("export") or {}
    return f"""# CAPER Clause-PRM: {m['name']}

Clause-level process reward model for Text-to-SQL candidates. A {cfg.model_type} architecture
({getattr(cfg, 'num_hidden_layers', '?')} layers, hidden {getattr(cfg, 'hidden_size', '?')},
{getattr(cfg, 'num_attention_heads', '?')} heads / {getattr(cfg, 'num_key_value_heads', '?')} KV heads,
vocabulary {getattr(cfg, 'vocab_size', '?')}) with a linear reward head on every token:
{m['parameters']:,} parameters. {'Fine-tuned from ' + str(tr['base']) if tr['base'] else ('Continued from ' + str(tr['init']) + ', preset ' + str(tr['preset'])) if tr.get('init') else 'Trained from scratch, preset ' + str(tr['preset'])}.

## Input
Prompt template `{m['template']}` (docs/FORMATS.md): `<s> schema <q> question <sql> unit_1 <clause> unit_2 <clause> ...`,
max length {m['max_length']}. The raw output at the k-th `{m['marker']}` (id {m['marker_id']}) scores the clause
prefix ending at unit k; it depends on tokens up to that marker only (causal attention). Scores shown to users are
`sigmoid(raw)`.{' Terminal verdict (caper.json `terminal_verdict`): one `</s>` follows the last marker; the output there judges the whole query (trained on right vs wrong whole queries, deletion mutants included).' if m.get('terminal_verdict') else ''}

## Files
- `model.onnx` fp32 ({exp.get('fp32_bytes', '?')} bytes), `model.int8.onnx` int8 dynamic-quantized ({exp.get('int8_bytes', '?')} bytes):
  inputs {', '.join('`%s`' % n for n in m['input_names'])} (int64 [batch, length]{'; prefix-tree packed rows, interface ' + m['packing'] if m.get('packing') else ''}), output `rewards` float32 [batch, length], opset {exp.get('opset', '?')}.
  Parity vs torch: fp32 max |diff| {exp.get('fp32_max_abs_diff', '?')}, int8 max |diff| {exp.get('int8_max_abs_diff', '?')}.
- `tokenizer.json` byte-level BPE, special ids `<pad>`=0 `<s>`=1 `</s>`=2 `<unk>`=3 `<clause>`=4 `<q>`=5 `<sql>`=6.
- `caper.json` manifest (template, marker, max length, parameter count, training data hash, metrics).

## Training
- Data: `{tr['data_file']}` ({m['data_hash']}), {tr['records']} records: {tr['train_pairs']} train pairs,
  {tr['train_trajectories']} train trajectories; held out by question: {tr['val_pairs']} pairs, {tr['val_trajectories']} trajectories.
  Skipped: {tr['skipped'] or 'none'}.
- Loss `{tr['loss']}` ({tr['pref_form']}): pairs (u+, u-) compared at their last marker,
  {'L_pref = mean (1 + delta) * -log sigmoid(r+ - r-)' if tr['pref_form'] == 'weighted' else 'L_pref = mean -log sigmoid(r+ - r- - delta)'}
  with delta the annotated margin{'; plus ' + str(tr['reg_weight']) + ' * mean BCEWithLogits(r_k, clamp(1 + reward_k, 0, 1)) over every marker of the trajectory records' if tr['loss'] == 'pref+reg' else ''}.
- {lora_line(tr)}{tr['steps']} steps ({tr['epochs']} epochs), batch {tr['batch_size']} records, AdamW lr {tr['lr']} (warm-up, cosine to 10% over the steps or --max-minutes, whichever ends first), seed {tr['seed']}.
- Training time {tr['train_seconds']} s on {tr['device']} ({tr['torch_threads']} threads, {tr.get('cpu_share', 0):.0%} of them on
  average: the machine was shared): {tr.get('records_per_second')} records/s, {tr['sequences_per_second']} sequences/s
  (a pair counts 2), {tr['tokens_per_second']} computed tokens/s (prefix-tree packing: {tr.get('packed_pairs')}). torch {tr['torch']}.

## Metrics (held-out questions)
| metric | value |
|---|---|
{met}

Produced by: `{tr['command']}` (from the repo root with PYTHONPATH=training; `caper train` runs the
whole pipeline: annotation, this training, export, evaluation).
"""
