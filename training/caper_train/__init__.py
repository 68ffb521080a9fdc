"""CAPER's Clause-PRM training, one subpackage per stage (the map opens training/README.md):
data (records, tokenizer, prompts) <- model (the reward model, its export, caper.json) <- the two
model lines, scratch (end to end) and base (a pretrained base on a CPU) <- ship (a trained model
stored and checked for serving); fit (the blame combiners) and reward_client (the client RL
trainers import) stand apart. tests/test_layout.py keeps the imports to that direction."""
