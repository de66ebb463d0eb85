// Terminal columns of text, counted per grapheme cluster as terminals (and Pi's TUI) draw it: an
// emoji sequence joined by ZWJ, a flag or a keycap takes two columns, a combining mark none, an
// East Asian wide or fullwidth character two. Built on Intl.Segmenter (no dependency).

const graphemes = new Intl.Segmenter(undefined, { granularity: 'grapheme' });

/**
 * East Asian Wide (W) and Fullwidth (F) code points (Unicode 17 EastAsianWidth.txt) that are
 * not Emoji_Presentation (those the regular expression below finds): [first, last] pairs, sorted.
 */
const WIDE = [
  [0x1100, 0x115f], [0x2329, 0x232a], [0x2630, 0x2637], [0x268a, 0x268f], [0x2e80, 0x2e99],
  [0x2e9b, 0x2ef3], [0x2f00, 0x2fd5], [0x2ff0, 0x303e], [0x3041, 0x3096], [0x3099, 0x30ff],
  [0x3105, 0x312f], [0x3131, 0x318e], [0x3190, 0x31e5], [0x31ef, 0x321e], [0x3220, 0x3247],
  [0x3250, 0xa48c], [0xa490, 0xa4c6], [0xa960, 0xa97c], [0xac00, 0xd7a3], [0xf900, 0xfaff],
  [0xfe10, 0xfe19], [0xfe30, 0xfe52], [0xfe54, 0xfe66], [0xfe68, 0xfe6b], [0xff01, 0xff60],
  [0xffe0, 0xffe6], [0x16fe0, 0x16fe4], [0x16ff0, 0x16ff6], [0x17000, 0x18cd5], [0x18cff, 0x18d1e],
  [0x18d80, 0x18df2], [0x1aff0, 0x1aff3], [0x1aff5, 0x1affb], [0x1affd, 0x1affe], [0x1b000, 0x1b122],
  [0x1b132, 0x1b132], [0x1b150, 0x1b152], [0x1b155, 0x1b155], [0x1b164, 0x1b167], [0x1b170, 0x1b2fb],
  [0x1d300, 0x1d356], [0x1d360, 0x1d376], [0x1f200, 0x1f200], [0x1f202, 0x1f202], [0x1f210, 0x1f219],
  [0x1f21b, 0x1f22e], [0x1f230, 0x1f231], [0x1f237, 0x1f237], [0x1f23b, 0x1f23b], [0x1f240, 0x1f248],
  [0x1f260, 0x1f265], [0x20000, 0x2fffd], [0x30000, 0x3fffd],
];

const emojiPresentation = /^\p{Emoji_Presentation}$/u;
const rgiEmoji = /^\p{RGI_Emoji}$/v;
/** What takes no column: non-spacing and enclosing marks, format and default-ignorable characters. */
const zeroWidth = /^[\p{Mn}\p{Me}\p{Cf}\p{Default_Ignorable_Code_Point}]$/u;

/** Whether code point `cp` is East Asian wide or fullwidth. */
function wide(cp) {
  let lo = 0;
  let hi = WIDE.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (cp < WIDE[mid][0]) hi = mid - 1;
    else if (cp > WIDE[mid][1]) lo = mid + 1;
    else return true;
  }
  return false;
}

/** Terminal columns one code point takes on its own. */
function codePointColumns(ch) {
  if (zeroWidth.test(ch)) return 0;
  const cp = ch.codePointAt(0);
  // Hangul medial vowels and final consonants join the syllable the initial one draws.
  if ((cp >= 0x1160 && cp <= 0x11ff) || (cp >= 0xd7b0 && cp <= 0xd7ff)) return 0;
  // A lone regional indicator draws as wide as the flag it would begin.
  if (wide(cp) || emojiPresentation.test(ch) || (cp >= 0x1f1e6 && cp <= 0x1f1ff)) return 2;
  return 1;
}

/**
 * Terminal columns one grapheme cluster takes: two for an emoji sequence (ZWJ, skin tone, flag,
 * keycap, a symbol with VS16), which draws as one picture; else what its code points take (a
 * base and its marks as one column, an Indic conjunct as its consonants).
 */
export function clusterColumns(cluster) {
  if (cluster.length === 1) return codePointColumns(cluster);
  if (rgiEmoji.test(cluster)) return 2;
  let columns = 0;
  for (const ch of cluster) columns += codePointColumns(ch);
  return columns;
}

/** Terminal columns `text` (no escape codes) takes. */
export function textColumns(text) {
  let columns = 0;
  for (const { segment } of graphemes.segment(text)) columns += clusterColumns(segment);
  return columns;
}

/** `text` (no escape codes) cut to `width` terminal columns, never inside a grapheme cluster. */
export function fitColumns(text, width) {
  let used = 0;
  let out = '';
  for (const { segment } of graphemes.segment(text.replace(/[\u0000-\u001f\u007f]/g, ' '))) {
    const columns = clusterColumns(segment);
    if (used + columns > width) break;
    used += columns;
    out += segment;
  }
  return out;
}

/**
 * `text` (one line, no escape codes) as rows of at most `width` terminal columns: broken after
 * the last space that fits, else between grapheme clusters (a long word or a JSON value).
 * Leading spaces are kept (indented text stays indented); an empty line is one empty row.
 */
export function wrapColumns(text, width) {
  const room = Math.max(1, width);
  const rows = [];
  let row = '';
  let used = 0;
  // The end of `row` just after its last space (where it may break), and the columns before it.
  let breakAt = -1;
  let breakUsed = 0;
  for (const { segment } of graphemes.segment(text.replace(/[\u0000-\u001f\u007f]/g, ' '))) {
    const columns = clusterColumns(segment);
    // Wider than a whole row (a wide character in one column): it cannot be drawn.
    if (columns > room) continue;
    if (used + columns > room && row !== '') {
      if (breakAt > 0 && segment !== ' ') {
        rows.push(row.slice(0, breakAt).trimEnd());
        row = row.slice(breakAt);
        used -= breakUsed;
      } else {
        rows.push(row.trimEnd());
        row = '';
        used = 0;
      }
      breakAt = -1;
      if (segment === ' ' && row === '') continue;
    }
    row += segment;
    used += columns;
    if (segment === ' ' && row.trim() !== '') {
      breakAt = row.length;
      breakUsed = used;
    }
  }
  rows.push(row.trimEnd());
  return rows;
}
