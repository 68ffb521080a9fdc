"""What turns a trained model into the directory the service reads, and the checks that the served
side computes what was trained: a base Clause-PRM's weights stored in 4 bits on model/grid's layouts
with its parity against the fp32 export measured (ship), a cut vocabulary for it (vocab), the graph
compared on identical ids with the PyTorch model its own weights rebuild (parity), a side probe
written into a shipped top-k graph (side_probe), past keys and values for the service's prefix
cache (past_kv), the same graph with int8 arithmetic in its 4-bit matrix products (int8), and the
reference encodings the TypeScript tokenizer and prompt parity tests compare with (encode). It comes after both model lines and may
import them, data/ and model/; nothing else in caper_train imports it."""
