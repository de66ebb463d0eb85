// Progress estimation and formatting for `progress` updates (`pi-workflows.progress.v1`), with
// the names and results pi-workflows workflows import. Pure: no host, no Pi.
//
// An estimate is read from a track's samples `{ at, data }` (oldest first). Only the current
// estimation epoch counts: it starts again when the phase, unit or total changes, `completed`
// goes down, or a finished track starts again. The rates of its last eight intervals give the
// ETA: the median the central one, the quartiles its range.

import { validateProgressData } from './updates.js';

const FINISHED = new Set(['completed', 'failed', 'cancelled']);
const MAX_INTERVALS = 8;

const ms = (at) => (typeof at === 'number' ? at : Date.parse(at));
const nowMs = (now) => (now instanceof Date ? now.getTime() : typeof now === 'number' ? now : Date.now());

/** Whether `next` starts a new estimation epoch after `before`. */
function newEpoch(before, next) {
  if (before.phase !== next.phase || before.unit !== next.unit || before.total !== next.total) return true;
  if (typeof before.completed === 'number' && typeof next.completed === 'number' && next.completed < before.completed) return true;
  return FINISHED.has(before.status) && !FINISHED.has(next.status);
}

/** The value at fraction `p` of sorted `values`, interpolated. */
function quantile(values, p) {
  const at = (values.length - 1) * p;
  const low = Math.floor(at);
  const high = Math.min(low + 1, values.length - 1);
  return values[low] + (values[high] - values[low]) * (at - low);
}

/** A fresh source estimate of the latest sample: after its source time, not passed yet. */
function sourceFinish(latest, now) {
  const finish = latest.data.sourceEstimatedFinishAt;
  if (finish === undefined) return undefined;
  const finishAt = Date.parse(finish);
  const sourceAt = latest.data.sourceUpdatedAt !== undefined ? Date.parse(latest.data.sourceUpdatedAt) : ms(latest.at);
  return finishAt > sourceAt && finishAt > nowMs(now) ? finish : undefined;
}

function confidenceOf(intervals, spread) {
  if (intervals >= 5) return spread <= 0.25 ? 'high' : spread <= 0.5 ? 'medium' : 'low';
  return intervals >= 2 && spread <= 0.5 ? 'medium' : 'low';
}

/**
 * The estimate of one progress track from its samples `[{ at, data }]` (oldest first; `at` an
 * ISO time or Unix ms): `{ key, data, sampleCount, elapsedMs?, delta?, rateLow?, rateMedian?,
 * rateHigh?, remainingLowMs?, remainingMedianMs?, remainingHighMs?, confidence?,
 * sourceEstimatedFinishAt?, unavailableReason? }`, rates in units per millisecond.
 */
export function estimateProgress(key, samples, now = new Date()) {
  if (!Array.isArray(samples) || samples.length === 0) throw new Error('estimateProgress needs at least one sample');
  for (const s of samples) validateProgressData(s.data);
  const latest = samples[samples.length - 1];
  const { data } = latest;
  const finished = FINISHED.has(data.status);
  const elapsed = (finished ? ms(latest.at) : nowMs(now)) - ms(samples[0].at);
  const estimate = { key, data, sampleCount: 1 };
  if (Number.isFinite(elapsed)) estimate.elapsedMs = Math.max(0, elapsed);
  if (finished) return estimate;
  const source = sourceFinish(latest, now);
  if (source !== undefined) estimate.sourceEstimatedFinishAt = source;
  const unavailable = (reason) => (source === undefined ? { ...estimate, unavailableReason: reason } : estimate);
  if (data.status === 'waiting' || data.status === 'blocked') return unavailable(`progress is ${data.status}`);
  if (data.completed === undefined || data.total === undefined) return unavailable('total is unknown');

  let start = 0;
  for (let i = 1; i < samples.length; i++) if (newEpoch(samples[i - 1].data, samples[i].data)) start = i;
  const epoch = samples.slice(start).slice(-(MAX_INTERVALS + 1));
  const intervals = [];
  for (let i = 1; i < epoch.length; i++) {
    const took = ms(epoch[i].at) - ms(epoch[i - 1].at);
    const [from, to] = [epoch[i - 1].data.completed, epoch[i].data.completed];
    if (!(took > 0) || typeof from !== 'number' || typeof to !== 'number') continue;
    intervals.push({ rate: (to - from) / took, delta: to - from });
  }
  estimate.sampleCount = intervals.length + 1;
  if (intervals.length > 0) estimate.delta = intervals[intervals.length - 1].delta;
  else return unavailable('needs another progress sample');
  const rates = intervals.map((i) => i.rate).sort((a, b) => a - b);
  const median = quantile(rates, 0.5);
  if (median <= 0) return unavailable('no positive progress rate');
  const [slow, fast] = [quantile(rates, 0.25), quantile(rates, 0.75)];
  const left = Math.max(0, data.total - data.completed);
  const high = fast > 0 ? fast : median;
  const result = {
    ...estimate,
    rateMedian: median,
    rateHigh: high,
    remainingLowMs: left / high,
    remainingMedianMs: left / median,
    confidence: confidenceOf(intervals.length, (fast - slow) / median),
  };
  // A non-positive slow rate leaves the range open: no upper bound.
  if (slow > 0) Object.assign(result, { rateLow: slow, remainingHighMs: left / slow });
  return result;
}

/** A duration as the widget shows it: `45s`, `18m`, `2.5h`, `12h`, `1.5d` (rounded up). */
export function formatRemaining(duration) {
  const s = Math.ceil(Math.max(0, duration) / 1000);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.ceil(s / 60)}m`;
  const h = s / 3600;
  if (h < 24) return `${h.toFixed(h < 10 ? 1 : 0)}h`;
  return `${(h / 24).toFixed(1)}d`;
}

// Made on first use: constructing an Intl formatter loads ICU's locale data, ~12 ms of CPU in
// every process that imports the package, workers included, which mostly never format.
let numberFormat = null;
const number = {
  format: (n) => (numberFormat ??= new Intl.NumberFormat('en-US', { maximumFractionDigits: 2 })).format(n),
};
// One line of a terminal: no control characters, runs of space made one.
const clean = (text) => String(text).replace(/[\p{Cc}\p{Cf}]+/gu, ' ').replace(/\s+/g, ' ').trim();

/** One line for a track: `Worker A  420/1,000 rows  ETA 18m–20m` (label, count, phase, ETA). */
export function formatProgressLine(estimate, now = new Date()) {
  const { data } = estimate;
  const unit = data.unit === undefined ? '' : ` ${clean(data.unit)}`;
  let count = data.status;
  if (data.completed !== undefined) {
    count = `${number.format(data.completed)}${data.total === undefined ? '' : `/${number.format(data.total)}`}${unit}`;
  }
  const parts = [clean(data.label ?? estimate.key), count];
  if (data.phase !== undefined) {
    parts.push(clean(data.phase));
    if (estimate.elapsedMs !== undefined) parts.push(`elapsed ${formatRemaining(estimate.elapsedMs)}`);
  }
  if (estimate.sourceEstimatedFinishAt !== undefined) {
    parts.push(`source ETA ${formatRemaining(Date.parse(estimate.sourceEstimatedFinishAt) - nowMs(now))}`);
  } else if (estimate.remainingMedianMs !== undefined) {
    const { remainingLowMs: low, remainingHighMs: high } = estimate;
    const ranged = low !== undefined && high !== undefined && Math.abs(high - low) >= 1000;
    parts.push(`ETA ${ranged ? `${formatRemaining(low)}–${formatRemaining(high)}` : formatRemaining(estimate.remainingMedianMs)}`);
  } else if (!FINISHED.has(data.status) && data.phase === undefined) {
    parts.push(`ETA unavailable${estimate.unavailableReason ? ` (${estimate.unavailableReason})` : ''}`);
  }
  return parts.filter(Boolean).join('  ');
}

/** Estimates in the order a display shows them: `overall`, then failed or blocked, then waiting, then the rest. */
export function prioritizeProgressEstimates(estimates) {
  const rank = (e) =>
    e.key === 'overall' ? 0 : e.data.status === 'failed' || e.data.status === 'blocked' ? 1 : e.data.status === 'waiting' ? 2 : 3;
  return estimates
    .map((e, i) => [e, i])
    .sort(([a, i], [b, j]) => rank(a) - rank(b) || i - j)
    .map(([e]) => e);
}

/**
 * A report of several tracks, at most `maxChars`: a `Progress:` line each, with its rate and
 * estimate basis when measured, tracks that do not fit counted, and `Next check: N min` last.
 */
export function formatProgressReport(estimates, nextCheckMinutes, now = new Date(), maxChars = 4000) {
  const footer = nextCheckMinutes === undefined ? [] : [`Next check: ${nextCheckMinutes} min`];
  const fits = (lines) => [...lines, ...footer].join('\n').length <= maxChars;
  const lines = [];
  let left = 0;
  for (const e of prioritizeProgressEstimates(estimates)) {
    const block = [`Progress: ${formatProgressLine(e, now)}`];
    if (e.rateMedian !== undefined && e.data.unit !== undefined) {
      const perMinute = (r) => r * 60_000;
      const ranged = e.rateLow !== undefined && e.rateHigh !== undefined && Math.abs(perMinute(e.rateHigh) - perMinute(e.rateLow)) >= 0.01;
      const rate = ranged
        ? `${number.format(perMinute(e.rateLow))}–${number.format(perMinute(e.rateHigh))}`
        : number.format(perMinute(e.rateMedian));
      block.push(`Rate: ${rate} ${clean(e.data.unit)}/min`, `Estimate: ${e.confidence ?? 'low'} confidence, ${e.sampleCount} samples`);
    }
    if (fits([...lines, ...block])) lines.push(...block);
    else left += 1;
  }
  if (left > 0) {
    const note = `${left} progress track${left === 1 ? '' : 's'} omitted.`;
    if (fits([...lines, note])) lines.push(note);
  }
  if (fits(lines)) lines.push(...footer);
  return lines.join('\n').slice(0, maxChars);
}

/**
 * Tracks from update records `[{ type, key, at, data }]` (oldest first; other types and data
 * that is not valid progress are skipped): `[{ key, samples, estimate }]`.
 */
export function progressTracksFromRecords(records, now = new Date()) {
  const tracks = new Map();
  for (const r of records) {
    if (r?.type !== 'progress') continue;
    try {
      validateProgressData(r.data);
    } catch {
      continue;
    }
    if (!tracks.has(r.key)) tracks.set(r.key, []);
    tracks.get(r.key).push({ at: r.at, data: r.data });
  }
  return [...tracks].map(([key, samples]) => ({ key, samples, estimate: estimateProgress(key, samples, now) }));
}

/**
 * Keeps the progress records a display needs: the newest `maxPerTrack` of each key, at most
 * `maxRecords` in all, oldest first.
 */
export function appendProgressHistory(history, additions, maxPerTrack = 9, maxRecords = 576) {
  const kept = [];
  const per = new Map();
  const all = [...history, ...additions];
  for (let i = all.length - 1; i >= 0 && kept.length < maxRecords; i--) {
    const r = all[i];
    if (r.type !== 'progress' || (per.get(r.key) ?? 0) >= maxPerTrack) continue;
    per.set(r.key, (per.get(r.key) ?? 0) + 1);
    kept.push(r);
  }
  return kept.reverse();
}

/**
 * piw's own: the progress tracks of a run's `run.status` → `updates` (the latest update per
 * key, with the `[at, completed]` samples of its current epoch), estimated at `now`.
 */
export function progressTracksFromStatus(updates, now = new Date()) {
  const records = [];
  for (const u of updates ?? []) {
    if (u?.type !== 'progress' || u.data_omitted) continue;
    const samples = Array.isArray(u.samples) && u.samples.length > 0 ? u.samples : [[u.at, u.data?.completed]];
    for (const [at, completed] of samples) {
      const data = completed === undefined ? u.data : { ...u.data, completed };
      records.push({ type: 'progress', key: u.key, at, data });
    }
  }
  return progressTracksFromRecords(records, now);
}
