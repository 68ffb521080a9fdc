"""The fits `caper train` makes on a trained model's outputs, apart from how that model was made:
the blame combiners (blamefit: conditional logits over a failing query's clauses that weigh the
model's clause verdicts against the query's evidence and, fused, the other candidates' consensus,
fitted with cross-validation grouped by database) and the conditional logit they are fitted with
(clogit). They read what scripts/blame-data.ts writes, not the model, so a model of either line
gets the same fits; they import nothing else of caper_train and nothing else here imports them."""
