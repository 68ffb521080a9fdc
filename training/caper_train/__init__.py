"""CAPER Clause-PRM training: tokenizer, reward model, data, loss, ONNX export."""
