// What a question asks for, read from its wording alone: the one reader of question cues, for the
// single-query evidence (src/rootcause/suspects.ts, whose facts the blame combiner weighs) and the
// selector and confidence features (src/scoring). Each cue is one row: its fact name and the
// words that raise it.

/** Cue name (as the evidence facts name it, src/clauses/labels.ts) -> the words that raise it. */
export const QUESTION_CUES = {
  q_count: /\b(how many|number of|count)\b/i,
  q_distinct: /\b(different|distinct|unique)\b/i,
  q_each: /\b(each|every|per|for all)\b/i,
  q_superl: /\b(most|least|highest|lowest|largest|smallest|maximum|minimum|greatest|fewest|oldest|youngest|best|worst|top|biggest|longest|shortest|earliest|latest)\b/i,
  q_order: /\b(order|sort|sorted|ascending|descending|alphabetical|alphabetically)\b/i,
  q_neg: /\b(not|without|never|no|neither|nor|except|excluding)\b|n't\b/i,
  q_both: /\bboth\b/i,
  q_or: /\bor\b/i,
  q_agg: /\b(average|mean|total|sum|maximum|minimum|max|min)\b/i,
  /** The answer is a list of things, not one: a superlative then ranks within it. */
  q_many: /\b(all|each|every|list)\b/i,
} as const satisfies Record<string, RegExp>;

export type QuestionCue = keyof typeof QUESTION_CUES;

export interface QuestionReading {
  /** Per cue: 1 when the question holds one of its words, else 0. */
  cues: Record<QuestionCue, 0 | 1>;
  /** A superlative with no list asked for: one row expected. */
  oneRow: 0 | 1;
  /** How many things it names (1 + the "and"s and commas), a rough bound on the answer's columns. */
  asked: number;
}

/** The question's cues (an absent question has none and asks for one thing). */
export function readQuestion(question: string | undefined): QuestionReading {
  const q = question ?? '';
  const cues = {} as Record<QuestionCue, 0 | 1>;
  for (const [name, re] of Object.entries(QUESTION_CUES) as [QuestionCue, RegExp][]) cues[name] = re.test(q) ? 1 : 0;
  const asked = 1 + (` ${q.toLowerCase()} `.match(/ and |,/g)?.length ?? 0);
  return { cues, oneRow: cues.q_superl && !cues.q_many ? 1 : 0, asked };
}
