"""Renders bench/results/lm-judge.md from `research/lm_judge.py eval --json-out` output.

    python research/lm_report.py runs/lm-judge/eval.json runs/lm-judge/examples.json > bench/results/lm-judge.md
"""
import json
import math
import sys


def ci(p: float, n: int) -> str:
    """95% normal-approximation half-width, in the unit of p (percent or fraction)."""
    scale = 100 if p > 1 else 1
    q = p / scale
    return f"±{1.96 * math.sqrt(max(q * (1 - q), 1e-12) / n) * scale:.{1 if scale == 100 else 3}f}"


def main() -> int:
    r = json.load(open(sys.argv[1]))
    ex = json.load(open(sys.argv[2])) if len(sys.argv) > 2 else None
    n = r["questions_scored"]
    sh = r["shipped_same_questions"]
    shall = r["shipped_all_questions"]
    rc = r["removed_clause"]
    rr = r["rerank_pool8"]
    bl = r["blame_expert"]
    c = r["cost"]
    L = []
    L.append("# Zero-shot judgment of the pretrained code model (Approach A)")
    L.append("")
    L.append("Qwen2.5-Coder-0.5B-Instruct (Q4_K_M GGUF from PyPI, dequantized to the HF folder of "
             "`training/setup-base.sh`, run in bf16), nothing fitted or tuned. Prompt: the chat template with "
             "the service's schema text and the question, the answer opened with \"```sql\\n\"; each SQL is "
             "scored as the continuation, closed by \"\\n```\" and <|im_end|> (the end of the answer).")
    L.append("")
    L.append("- verdict `sum`: log-probability of the answer (SQL + end); verdict `mean`: the same per token.")
    L.append("- clause surprisal: -log-probability of the unit's tokens (a token belongs to the unit holding its last "
             "character); blame `sum` = highest total surprisal first, `mean` = per token, `max` = the unit with the "
             "single most surprising token, `first_jump` = the first unit with a token under 5% (3 nats, fixed in advance).")
    L.append("")
    if n == r["questions_total"]:
        L.append(f"All {n} dev-open questions; models/small beside it. ± is a 95% normal-approximation interval.")
    else:
        L.append(f"Subsample: {n} of {r['questions_total']} dev-open questions, a uniform random sample (questions in a "
                 "seed-0 random order, scored until the time budget ran out on the shared 2 cores). Every figure below is "
                 "on those questions, with models/small on the same questions beside it (its all-question figure "
                 "in brackets). ± is a 95% normal-approximation interval.")
    L.append("")
    L.append("```")
    L.append("node research/lm-items.mjs                      # units, schema texts, pool8 correctness, pairs")
    L.append("OMP_NUM_THREADS=2 nice -n 10 python research/lm_judge.py score --items runs/lm-items.json \\")
    L.append("    --base runs/base/qwen2.5-coder-0.5b --out runs/lm-judge/scores.jsonl --threads 2 --max-minutes 80")
    L.append("python research/lm_judge.py eval --items runs/lm-items.json --scores runs/lm-judge/scores.jsonl \\")
    L.append("    --facts runs/facts-pool8.json --removed bench/results/removed-clause.json --json-out runs/lm-judge/eval.json")
    L.append("# runs/facts-pool8.json: caper eval rerank --data ../shared/data/spider/dev-open --pool pool8 --strategy prm \\")
    L.append("#     --model models/small --device cpu --facts runs/facts-pool8.json")
    L.append("```")
    L.append("")
    L.append("## Removed-clause pairs (bench/removed-clause: gold vs gold with one needed clause cut, result changed)")
    L.append("")
    L.append("| removed | pairs | LM `mean` | LM `sum` |")
    L.append("|---|---|---|---|")
    for k in ["all", "WHERE", "JOIN", "GROUP BY", "HAVING", "SETOP"]:
        if k in rc["mean"]:
            m, s = rc["mean"][k], rc["sum"][k]
            L.append(f"| {k} | {m['n']} | {m['pct_complete_higher']:.1f} | {s['pct_complete_higher']:.1f} |")
    L.append("")
    L.append(f"models/small (min clause score) on the same pairs: {sh['removed_clause_pct_complete_higher']:.1f}% "
             f"(n {sh['removed_clause_n']}; all 493 pairs: {shall['removed_clause_pct_complete_higher']:.1f}%). Target >= 95%.")
    L.append("")
    L.append("## PRM-only rerank, pool8 (the candidate with the highest verdict; ties by pool order)")
    L.append("")
    L.append("| picker | EX |")
    L.append("|---|---|")
    L.append(f"| LM verdict `mean` | **{rr['mean']:.1f}** {ci(rr['mean'], n)} |")
    L.append(f"| LM verdict `sum` | {rr['sum']:.1f} {ci(rr['sum'], n)} |")
    L.append(f"| models/small, PRM only | {sh['rerank_prm_pool8']:.1f} ({shall['rerank_prm_pool8']:.1f} on all 538) |")
    L.append(f"| text vote (lower-cased, whitespace-collapsed SQL; pool order breaks ties) | {rr['text_vote_same_questions']:.1f} (82.9 on all 538; the project's canonical-SQL vote: 82.7) |")
    d = sh.get("rerank_discordant_vs_mean")
    if d:
        L.append(f"| (paired on these questions: LM `mean` right where models/small is wrong {d['lm_only']}, the reverse {d['shipped_only']}) | |")
    L.append(f"| text vote, ties broken by LM `mean` | {rr['text_vote_ties_by_mean']:.1f} |")
    L.append(f"| text vote, ties broken by LM `sum` | {rr['text_vote_ties_by_sum']:.1f} |")
    L.append(f"| best single system (dail-sql-gpt4) | {rr['best_single_same_questions']:.1f} (82.7) |")
    L.append(f"| oracle | {rr['oracle_same_questions']:.1f} (91.8) |")
    L.append("")
    L.append(f"## Blame vs the expert labels ({bl['n']} labelled pool8 failures of these questions)")
    L.append("")
    L.append("| blame | Top-1 | MRR |")
    L.append("|---|---|---|")
    for k in ["sum", "max", "mean", "first_jump"]:
        L.append(f"| LM surprisal `{k}` | {bl[k]['top1']:.3f} {ci(bl[k]['top1'], bl['n'])} | {bl[k]['mrr']:.3f} |")
    L.append(f"| models/small alone, lowest clause score first | {sh['blame_min']['top1']:.3f} | {sh['blame_min']['mrr']:.3f} "
             f"(all 312: {shall['blame_min']['top1']:.3f} / {shall['blame_min']['mrr']:.3f}) |")
    L.append(f"| most common label of these items | {bl['most_common_label_share']:.3f} | |")
    L.append("")
    L.append("## Cost")
    L.append("")
    L.append(f"{c['seconds_per_question_mean']:.1f} s per question (median {c['seconds_per_question_median']:.1f}) for "
             f"{c['sql_per_question_mean']:.1f} distinct SQL and {c['tokens_per_question_mean']:.0f} tokens per question "
             "(prompt once, every SQL as a continuation of its cached prefix in one batch), 2 torch threads, bf16, on "
             "the 2 shared cores at load average 7-15 (several engineers' jobs at once): CPU time was shared, so "
             "an idle machine is faster (the last 25 questions, scored with the other jobs finished at load "
             "average ~2: 3.5 s per question). models/small serves a pool8 /rerank in 22 ms p50 at concurrency 1 "
             "(bench/results/serve.md): 150-500 times less.")
    if ex:
        L.append("")
        L.append("## Documented examples (research/lm_examples.py)")
        L.append("")
        for k, v in ex.items():
            parts = [f"`{s}` {v['verdicts'][s]['sum']:.2f} / {v['verdicts'][s]['mean']:.3f}" for s in v["ranked_by_sum"]]
            L.append(f"- {k} (verdict sum / mean): " + " > ".join(parts) + f"; right query first: {v['right_query_first']}")
    print("\n".join(L))
    return 0


if __name__ == "__main__":
    sys.exit(main())
