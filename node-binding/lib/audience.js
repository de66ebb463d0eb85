// Which decision channels a protected human decision goes to, from its `audience` (a pure
// decision: the Telegram adapter, and any adapter after it, asks it with the names of the
// channels configured now). The audience names channels: one channel name, or several
// separated by commas (`telegram`, `telegram,ops`).
//
// - No audience: every configured channel.
// - An audience naming configured channels: only those.
// - `operator` (the audience plan-approval and pi-workflows use when none is given) naming
//   none: every configured channel, since every channel of an installation is its operator's.
// - Any other audience naming none (a label such as `reviewers`, a channel removed since): no
//   channel. The decision is not lost: it still shows in the Pi session of its run and in
//   `piw run status`, and `piw run decide` (or `/workflow answer`) answers it; the adapters
//   log that it reached no channel.

/** The audience that means "whoever runs this installation". */
export const OPERATOR_AUDIENCE = 'operator';

/** The channel names an audience lists (trimmed, empty items left out). */
export function audienceNames(audience) {
  if (typeof audience !== 'string') return [];
  return audience
    .split(',')
    .map((name) => name.trim())
    .filter(Boolean);
}

/**
 * The configured channels (`configured`: their names) a decision for `audience` goes to, and
 * `unrouted`: true when an audience was given and no channel gets it.
 */
export function channelsFor(audience, configured) {
  const names = audienceNames(audience);
  if (names.length === 0) return { channels: [...configured], unrouted: false };
  const named = configured.filter((c) => names.includes(c));
  if (named.length > 0) return { channels: named, unrouted: false };
  if (names.length === 1 && names[0] === OPERATOR_AUDIENCE) return { channels: [...configured], unrouted: false };
  return { channels: [], unrouted: true };
}
