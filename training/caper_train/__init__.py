"""CAPER Clause-PRM training: tokenizer, reward model, data, loss, ONNX export."""

TEMPLATE = "caper-prompt-v1"
# Fixed by docs/FORMATS.md: the TypeScript scorer relies on these ids.
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<unk>", "<clause>", "<q>", "<sql>"]
PAD_ID, BOS_ID, EOS_ID, UNK_ID, CLAUSE_ID, Q_ID, SQL_ID = range(7)
MARKER = "<clause>"
QUESTION_MAX_TOKENS = 96
