// The selector's reason in words, for a reader of a /rerank response: who agrees, what the clause
// model thinks, why a group overrules the largest one. The numbers stay in the reason's fields
// (src/scoring/selector.ts explain); docs/SELECTOR.md defines the features these words stand for.

/** What each feature family weighs, in words. */
const FEATURE_WORDS: [RegExp, string][] = [
  [/^(share|top|margin)$/, 'how many candidates agree'],
  [/^(prm_delta|clause_vote_delta)$/, 'the clause where it parts from the largest group'],
  [/^(prm_|last_mean|clause_mean)/, "the clause model's scores"],
  [/^(agree_|sql_agree)/, 'how many other candidates write the same clauses'],
  [/^(lit_missing)$/, 'values the database does not hold'],
  [/^(cols_excess|text_cols_|count_shape|superlative_one_row)/, 'how well its columns fit the question'],
  [/^(star|like|len_ratio|nest|joins|distinct_kw|limit_kw)$/, 'the style of its SQL'],
];
const inWords = (feature: string): string => FEATURE_WORDS.find(([re]) => re.test(feature))?.[1] ?? 'the shape of its result';

/** What the summary of one group says. */
export interface GroupFacts {
  mode: 'exec' | 'sql';
  /** Members of the group, of n candidates. */
  size: number;
  n: number;
  /** Highest PRM candidate score in the group. */
  prm: number;
  empty: boolean;
  allNull: boolean;
  missingLiterals: boolean;
  /** When the group ranks above the largest one: that group's size and what moved the decision. */
  over: { size: number; factors: readonly { feature: string; contribution: number }[] } | null;
}

/** A group's reason in plain words (the summary after the rank the reason opens with). */
export function plainSummary(g: GroupFacts): string {
  const parts = [g.mode === 'exec' ? `${g.size} of ${g.n} candidates return this result` : `${g.size} of ${g.n} candidates write this query (the same SQL up to form)`];
  if (g.over) {
    const why = [...new Set(g.over.factors.filter((f) => f.contribution > 0).map((f) => inWords(f.feature)))];
    parts.push(`it ranks above the largest group (${g.over.size} of ${g.n})${why.length ? ` on ${why.join(' and ')}` : ''}`);
  }
  // 0.5 = sigmoid(0): where the clause model's verdict turns from wrong to right.
  parts.push(g.prm >= 0.5 ? 'the clause model judges its best query right' : 'the clause model judges every query in it wrong');
  if (g.empty) parts.push('the result is empty');
  else if (g.allNull) parts.push('the result holds only NULLs');
  if (g.missingLiterals) parts.push('it compares a column with a value the database never holds, so it ranks below every group that does not');
  return parts.join('; ');
}
