"""The pretrained-base line, `python -m caper_train.base.base_prm` (what `caper train --base DIR
--family probe|topk` runs): a Clause-PRM on the first N layers of a pretrained chat code model,
trained where this project's machines are, on a CPU, with caper-chat-v1 prompts. It owns the base
checkpoint built from registry packages (checkpoint), the faster dtype and each family's cost on
this machine (throughput), the base's states computed once per question and cached (features), the
two families trained on them, a linear head (probe, which also exports the truncated base with its
head as a model directory and reads one back) and the top k layers with the head (topk), and the
resumable steps that chain them (base_prm). It builds on data/ and model/; scratch/ is its peer,
and neither imports the other."""
