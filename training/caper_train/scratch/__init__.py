"""The end-to-end line, `python -m caper_train.scratch.train` (what `caper train` runs without
--family): a reward model whose every weight is trained, on caper-prompt-v1 prompts with its own
tokenizer and marker tokens: a preset from scratch (models/tiny, models/small), a model continued
(--init; a shipped directory's weights are recovered from its graph by from_onnx), or a Hugging
Face checkpoint fine-tuned whole or through LoRA on a GPU (--base). It owns the run's settings
(model_spec, context), data parallelism under torchrun (distributed), the packing of a question's
records into prefix-tree rows (packing), the loss and held-out metrics (objective), the loop and its
checkpoints (loop), the run's data and split (train_data), and what rank 0 writes once training
ends (train_export, model_card). It builds on data/ and model/; base/ is its peer, and neither
imports the other."""
