// Workflow updates as pi-workflows has them: `{ type, key, data }`, checked before they are
// published; `type: "progress"` data follows the `pi-workflows.progress.v1` schema.

/** The largest `data` of one update, as UTF-8 JSON. */
export const MAX_UPDATE_DATA_BYTES = 64 * 1024;

const TYPE = /^[a-z][a-z0-9.-]{0,63}$/;
const KEY = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;
const PROGRESS_SCHEMA = 'pi-workflows.progress.v1';
const PROGRESS_STATUSES = ['pending', 'running', 'waiting', 'blocked', 'completed', 'failed', 'cancelled', 'unknown'];
const PROGRESS_FIELDS = [
  'schema',
  'status',
  'label',
  'phase',
  'completed',
  'total',
  'unit',
  'sourceUpdatedAt',
  'sourceEstimatedFinishAt',
];

/** A plain object (not an array, a class instance or null). */
function plainObject(value) {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

/** Throws when `value` is not JSON data made of plain objects, arrays and finite numbers. */
function jsonData(value, path) {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return;
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new Error(`${path} holds a number JSON cannot: ${value}`);
    return;
  }
  if (Array.isArray(value)) {
    value.forEach((v, i) => jsonData(v, `${path}[${i}]`));
    return;
  }
  if (plainObject(value)) {
    for (const [k, v] of Object.entries(value)) jsonData(v, `${path}.${k}`);
    return;
  }
  throw new Error(`${path} holds a value JSON cannot (${typeof value})`);
}

/**
 * Checks an update and returns it as `{ type, key, data }`: `type` matches
 * `[a-z][a-z0-9.-]{0,63}`, `key` `[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}`, `data` is a JSON object
 * of at most 64 KiB; a `progress` update's data is checked by `validateProgressData`. Throws
 * the first problem.
 */
export function validateWorkflowUpdate(update) {
  if (!plainObject(update)) throw new Error('an update must be an object { type, key, data }');
  const unknown = Object.keys(update).find((k) => k !== 'type' && k !== 'key' && k !== 'data');
  if (unknown) throw new Error(`update.${unknown} is not supported (an update is { type, key, data })`);
  const { type, key, data } = update;
  if (typeof type !== 'string' || !TYPE.test(type)) throw new Error(`update.type must match ${TYPE.source}, got ${JSON.stringify(type ?? null)}`);
  if (typeof key !== 'string' || !KEY.test(key)) throw new Error(`update.key must match ${KEY.source}, got ${JSON.stringify(key ?? null)}`);
  if (!plainObject(data)) throw new Error('update.data must be a JSON object');
  jsonData(data, 'update.data');
  const bytes = Buffer.byteLength(JSON.stringify(data));
  if (bytes > MAX_UPDATE_DATA_BYTES) throw new Error(`update.data is ${bytes} bytes; at most ${MAX_UPDATE_DATA_BYTES}`);
  if (type === 'progress') validateProgressData(data);
  return { type, key, data };
}

function optionalText(value, path, max) {
  if (value === undefined) return;
  if (typeof value !== 'string' || value.length === 0 || value.length > max) {
    throw new Error(`${path} must be a string of 1 to ${max} characters`);
  }
}

function optionalDate(value, path) {
  if (value === undefined) return;
  if (typeof value !== 'string' || Number.isNaN(Date.parse(value))) throw new Error(`${path} must be an ISO date`);
}

const unitOk = (unit) => typeof unit === 'string' && unit.length >= 1 && unit.length <= 32 && !/\p{Cc}/u.test(unit);

/**
 * Checks the data of a `progress` update: `{ schema: "pi-workflows.progress.v1", status,
 * label?, phase?, completed?, total?, unit?, sourceUpdatedAt?, sourceEstimatedFinishAt? }`,
 * `unit` required with counts, `total` positive and at least `completed`. Returns it.
 */
export function validateProgressData(data) {
  if (!plainObject(data)) throw new Error('progress data must be an object');
  const unknown = Object.keys(data).find((k) => !PROGRESS_FIELDS.includes(k));
  if (unknown) throw new Error(`progress.${unknown} is not supported`);
  if (data.schema !== PROGRESS_SCHEMA) throw new Error(`progress.schema must be "${PROGRESS_SCHEMA}"`);
  if (!PROGRESS_STATUSES.includes(data.status)) throw new Error(`progress.status must be one of ${PROGRESS_STATUSES.join(', ')}`);
  optionalText(data.label, 'progress.label', 200);
  optionalText(data.phase, 'progress.phase', 128);
  if (data.completed !== undefined && !(typeof data.completed === 'number' && Number.isFinite(data.completed) && data.completed >= 0)) {
    throw new Error('progress.completed must be a finite number, at least zero');
  }
  if (data.total !== undefined) {
    if (!(typeof data.total === 'number' && Number.isFinite(data.total) && data.total > 0)) {
      throw new Error('progress.total must be a finite number above zero');
    }
    if (typeof data.completed === 'number' && data.completed > data.total) {
      throw new Error('progress.total must be at least progress.completed');
    }
  }
  const counted = data.completed !== undefined || data.total !== undefined;
  if ((counted || data.unit !== undefined) && !unitOk(data.unit)) {
    throw new Error(`progress.unit must be 1 to 32 printable characters${counted ? ' (it is required with counts)' : ''}`);
  }
  optionalDate(data.sourceUpdatedAt, 'progress.sourceUpdatedAt');
  optionalDate(data.sourceEstimatedFinishAt, 'progress.sourceEstimatedFinishAt');
  return data;
}
