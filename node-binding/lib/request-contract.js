// The request of an interaction or a decision (what the worker runtime writes: a step's prompt
// and expected output, a decision's question and choices), read through its contract and
// tolerating missing fields: what the Pi extension shows and what a decision's answers are
// checked against.

const str = (v) => (typeof v === 'string' && v.trim() !== '' ? v : null);

/** The request of an interaction or a decision, read through the contract. */
export function readRequest(request) {
  const r = request && typeof request === 'object' && !Array.isArray(request) ? request : {};
  return {
    workflow: str(r.workflow),
    title: str(r.title),
    node: str(r.node),
    kind: str(r.kind),
    prompt: str(r.prompt),
    expectedOutput: str(r.expectedOutput),
    statusDetail: str(r.statusDetail),
    maxChars: typeof r.maxChars === 'number' ? r.maxChars : null,
    summary: str(r.summary),
    question: str(r.question),
    details: str(r.details),
    choices: Array.isArray(r.choices)
      ? r.choices.filter((c) => c && typeof c.id === 'string').map((c) => ({ id: c.id, label: str(c.label) ?? c.id, description: str(c.description) }))
      : [],
    textInput: r.textInput && typeof r.textInput === 'object' ? r.textInput : null,
    extra: r.extra && typeof r.extra === 'object' ? r.extra : null,
    // Nothing the contract names: an older runtime's request, shown raw.
    raw: str(r.prompt) || str(r.summary) || str(r.question) ? null : request,
  };
}
