"""What every model reads, and nothing else of caper_train: the training records of
docs/FORMATS.md (records), the byte-level BPE tokenizer (tok), the two prompt layouts that turn a
record into token ids, caper-prompt-v1 with its fixed special ids (prompt) and caper-chat-v1 for a
pretrained chat base (chat_prompt), both mirrored by src/scoring/, and the commands that make more
data or narrow a split: borrowed-gold near misses for `caper annotate --failures` (borrowed) and
a Spider-layout view of some databases for held-out evaluation (dataview), and real candidates
sampled from a local open code model over a split (sample, driven by `caper sample`). A new data source
belongs here; the model lines and the shipping step build on it, never the reverse."""
