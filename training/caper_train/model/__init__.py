"""The reward model both training lines produce and the form it is served in: the torch module, a
Qwen2 decoder with a scalar head read at every token (reward_model), the LoRA adapters either line
may put on it (lora), its ONNX export under the prefix-tree-v1 interface with the parity checks and
the reading of a graph back into torch (export), the 4-bit grid a base model is trained and shipped
on and how a graph stores its codes (grid), and caper.json, checked against
models/caper.schema.json and written one step's sections at a time (manifest), with the paths those records show made relative
to the repo (paths). It builds on data/
alone; the scratch and base lines write their models through it, and ship/ stores them."""
