#!/usr/bin/env bash
# Rebuilds models/default from a fresh checkout, step by step, each step skipped when its output
# exists (so a stopped run is continued by running the script again): the pretrained base and its
# 4-bit grid, the annotated records, the base Clause-PRM training (checkpointed, resumed), the
# 4-bit ship with its parity check, the side probe on the frozen layer-9 states, and the downstream
# refit on the training databases.
# Everything but the last two steps writes under runs/ (git-ignored); those write OUT.
# usage: bash training/reproduce-default.sh [OUT]   (default runs/models/default-rebuilt; pass
#        models/default to replace the shipped model, which caper train then needs --force for)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="${1:-runs/models/default-rebuilt}"
dev="${CAPER_DEV_OPEN:-../shared/data/spider/dev-open}"
train_split="${CAPER_SPIDER_TRAIN:-../shared/data/spider/train}"
# The held-out split fixed before any training (training/README.md); never change it.
held=dog_kennels,tvshow,pets_1,concert_singer,voter_1
train_dbs=course_teach,flight_2,museum_visit,orchestra,real_estate_properties
py=training/.venv/bin/python
pp="training:runs/base-pkgs"
rec=runs/prm-base
base=runs/base/qwen2.5-coder-0.5b
annotate() { node dist/src/cli.js annotate "$@"; }

[ -f dist/src/cli.js ] || npm run build
bash training/setup-base.sh
[ -f "$base-g128/caper-base.json" ] || PYTHONPATH=$pp "$py" -m caper_train.model.grid --base "$base" --out "$base-g128"
[ -f runs/heldout-data/dev.json ] || PYTHONPATH=$pp "$py" -m caper_train.data.dataview --data "$dev" --dbs "$held" --out runs/heldout-data
[ -f runs/train-data/dev.json ] || PYTHONPATH=$pp "$py" -m caper_train.data.dataview --data "$dev" --dbs "$train_dbs,world_1" --out runs/train-data

mkdir -p "$rec/extra-shards"
[ -f "$rec/pool16-train.jsonl" ] || annotate --data "$dev" --candidates --mutants-per-query 0 --dbs "$train_dbs,world_1" --timeout-ms 1000 --out "$rec/pool16-train.jsonl"
[ -f "$rec/pool16-heldout.jsonl" ] || annotate --data "$dev" --candidates --mutants-per-query 0 --dbs "$held" --timeout-ms 1000 --out "$rec/pool16-heldout.jsonl"
[ -f "$rec/extra.jsonl" ] || annotate --data "$dev" --failures "$dev/predictions-extra" --mutants-per-query 0 --dbs "$train_dbs" --timeout-ms 1000 --out "$rec/extra.jsonl"
for k in 0 1 2; do
  [ -f "$rec/spider-train-s$k.jsonl" ] || annotate --data "$train_split" --shard "$k/10" --out "$rec/spider-train-s$k.jsonl"
done
# world_1's predictions-extra in twentieths under a time limit: one question of shard 0 keeps the
# root-cause search busy past --timeout-ms, so that shard is left out.
for k in $(seq 1 19); do
  [ -f "$rec/extra-shards/s$k.jsonl" ] || timeout 100 node dist/src/cli.js annotate --data "$dev" --failures "$dev/predictions-extra" \
    --mutants-per-query 0 --dbs world_1 --timeout-ms 1000 --shard "$k/20" --out "$rec/extra-shards/s$k.jsonl" || true
done
records=("$rec/extra.jsonl" "$rec"/extra-shards/s*.jsonl "$rec/pool16-train.jsonl" "$rec"/spider-train-s{0,1,2}.jsonl)

model=runs/models/prm-default
resume=()
[ -f "$rec/default/topk/checkpoint.pt" ] && resume=(--resume)
[ -f "$model/caper.json" ] || PYTHONPATH=$pp OMP_NUM_THREADS=2 "$py" -m caper_train.base.base_prm --records "${records[@]}" \
  --exclude-dbs "$held" --base "$base-g128" --family topk --layers 15 --top-k 6 --epochs 1.7 --lr 3e-5 \
  --blame-weight 0.3 --max-minutes 70 --per-question 16 --threads 2 --out "$model" --run "$rec/default" "${resume[@]}"
# The cut vocabulary is what lets 15 layers fit the size budget; it is chosen from the training
# records only. Parity compares with the whole-vocabulary export, so held-out prompts whose words
# were cut count against it: the floor is lowered from ship's default to say that this is expected.
shipped=runs/models/prm-default-shipped
[ -f "$shipped/caper.json" ] || PYTHONPATH=$pp "$py" -m caper_train.ship.ship --model "$model" --out "$shipped" \
  --records "$rec/pool16-heldout.jsonl" --max-questions 120 --min-agreement 0.95 \
  --vocab 48000 --vocab-records "${records[@]}"
# The side probe (training/README.md, "A side probe"): layer-9 states of the training databases' real
# candidates and of Spider train's borrowed near misses and injected faults, cached as the continued
# run of the README cached them, then a probe on them written into the shipped graph.
[ -f runs/borrowed/borrowed-sql.sql ] || PYTHONPATH=$pp "$py" -m caper_train.data.borrowed --data "$train_split" --out runs/borrowed
for k in 0 1 2 3 4; do
  [ -f "$rec/borrowed/s$k.jsonl" ] || annotate --data "$train_split" --failures runs/borrowed --mutants-per-query 0 \
    --timeout-ms 1000 --shard "$k/10" --out "$rec/borrowed/s$k.jsonl"
done
feats=(--base "$base-g128" --layers 9 --rows-layer 9 --exclude-dbs "$held" --dtype float32 --threads 2 --seed 0)
[ -f runs/side/feats-dev/meta.json ] || PYTHONPATH=$pp "$py" -m caper_train.base.features "${feats[@]}" --per-question 16 \
  --records "$rec/pool16-train.jsonl" "$rec/extra.jsonl" "$rec"/extra-shards/s*.jsonl --out runs/side/feats-dev
[ -f runs/side/feats-borrowed/meta.json ] || PYTHONPATH=$pp "$py" -m caper_train.base.features "${feats[@]}" --per-question 8 \
  --max-questions 1000 --records "$rec"/borrowed/s{0,1,2,3,4}.jsonl "$rec"/spider-train-s{0,1,2}.jsonl \
  --out runs/side/feats-borrowed
[ -f "$out/caper.json" ] || PYTHONPATH=$pp "$py" -m caper_train.ship.side_probe --model "$shipped" --base "$base-g128" \
  --cache runs/side/feats-dev runs/side/feats-borrowed --layer 9 --exclude-dbs "$held" --out "$out"
rm -rf "runs/$(basename "$out")"
force=()
case "$out" in models/*) force=(--force) ;; esac
node dist/src/cli.js train --only selector,confidence,blame-data,blame,evaluate,manifest --out "$out" --eval-data runs/train-data "${force[@]}"
echo "rebuilt $out; held-out figures: node dist/bench/prm-base.js --data runs/heldout-data --models $out,models/small --out runs/prm-base-rebuilt"
