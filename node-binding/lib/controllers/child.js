// A reconcile pass in its own process, as the host runs one: the envelope on stdin (the
// resource as the host read it, the pass's credentials, the controller's file), the file
// checked against the hash it was registered with and loaded, one `runReconcilePass`, every
// backend call sent to the host over the protocol (fenced by the pass's claim), and the result
// committed with `controller.pass.finish`. The host commits everything; this process writes
// nothing of its own, and a pass killed at any point is safe to run again.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';

import { Client } from '../client.js';
import { resolveWorkflow } from '../workflow-names.js';
import { loadControllerFile } from './discover.js';
import { ControllerError } from './errors.js';
import { runReconcilePass } from './pass.js';

/** How much earlier than the host's kill the pass's own deadline falls: a pass that ignores its signal still reports `deadline` itself. */
const DEADLINE_MARGIN_MS = 2_000;

const iso = (ms) => (ms === null || ms === undefined ? undefined : new Date(ms).toISOString());

/** The resource as a controller reads it, from the host's record. */
function resourceOf(record, definition) {
  const metadata = {
    uid: record.uid,
    controller: record.controller,
    key: record.key,
    resourceVersion: record.resource_version,
    generation: record.generation,
    finalizers: [...record.finalizers],
  };
  if (record.deletion_requested_at !== null && record.deletion_requested_at !== undefined) {
    metadata.deletionTimestamp = iso(record.deletion_requested_at);
  }
  const status = record.status ?? { observedGeneration: 0, conditions: [], controllerStatus: definition.initialStatus(record.spec) };
  return { metadata, spec: record.spec, status };
}

/** An effect record as the pass reads it, from the host's. */
function effectOf(r) {
  if (!r) return null;
  const out = {
    key: r.key,
    resourceUid: r.resource_uid,
    generation: r.generation,
    kind: r.kind,
    requestFingerprint: r.request_fingerprint,
    state: r.state,
    startedAt: iso(r.started_at),
  };
  if (r.completed_at !== null && r.completed_at !== undefined) out.completedAt = iso(r.completed_at);
  if (r.external_ref !== null && r.external_ref !== undefined) out.externalRef = r.external_ref;
  if (r.error !== null && r.error !== undefined) out.error = r.error;
  return out;
}

/** A child workflow request as the pass reads it, from the host's. */
function workflowOf(r) {
  const out = {
    requestId: r.request_id,
    resourceUid: r.resource_uid,
    requestKey: r.request_key,
    workflow: r.workflow,
    inputFingerprint: r.input_fingerprint,
    state: r.state,
    attempt: r.attempt,
  };
  if (r.run_id !== null && r.run_id !== undefined) out.runId = r.run_id;
  if (r.error !== null && r.error !== undefined) out.error = r.error;
  return out;
}

/** The backend of a pass served by the host: each call one request, fenced by `pass`. */
function hostBackend(client, pass, projectDir) {
  const body = async (kind, payload) => (await client.request(kind, {}, { pass, ...payload })).body;
  return {
    async recordEffect({ key, kind, generation, requestFingerprint }) {
      const b = await body('controller.effect.record', { key, kind, generation, request_fingerprint: requestFingerprint });
      return { record: effectOf(b.record), created: b.created };
    },
    async effect({ key }) {
      return effectOf((await body('controller.effect.get', { key })).record);
    },
    async settleEffect({ key, state, externalRef, error }) {
      const b = await body('controller.effect.settle', { key, state, external_ref: externalRef ?? null, error: error ?? null });
      return effectOf(b.record);
    },
    async ensureWorkflowRun({ requestKey, workflow, input, inputFingerprint }) {
      // The name is resolved in the project as `piw run start <name>` resolves it; the host
      // reads the file.
      let file;
      try {
        file = (await resolveWorkflow(workflow, projectDir)).path;
      } catch (e) {
        throw new ControllerError('not_found', `ctx.workflows.ensure(${JSON.stringify(requestKey)}): ${e.message}`);
      }
      const b = await body('controller.workflow.ensure', {
        request_key: requestKey,
        workflow,
        workflow_file: file,
        project_dir: projectDir,
        input,
        input_fingerprint: inputFingerprint,
      });
      return workflowOf(b.request);
    },
  };
}

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString('utf8'));
}

async function main() {
  const envelope = await readStdin();
  const pass = { resource_uid: envelope.resource_uid, pass_id: envelope.pass_id, token: envelope.token };
  const client = await Client.connect({ start: false });
  const finish = (outcome) =>
    client.request(
      'controller.pass.finish',
      {},
      {
        pass,
        kind: outcome.kind,
        after_ms: outcome.afterMs ?? null,
        message: outcome.message ?? null,
        status: outcome.status ?? null,
        finalizers: outcome.finalizers ?? null,
      },
    );
  let definition;
  try {
    const hash = createHash('sha256').update(readFileSync(envelope.source_path)).digest('hex');
    if (hash !== envelope.source_hash) {
      throw new ControllerError('source_changed', `${envelope.source_path} changed since the controller was registered; register it again (controller.register) to run the new code`);
    }
    definition = await loadControllerFile(envelope.source_path);
    if (definition.name !== envelope.controller) {
      throw new ControllerError('load_failed', `${envelope.source_path} defines controller "${definition.name}", not "${envelope.controller}"`);
    }
  } catch (e) {
    await finish({ kind: 'error', message: e.message });
    await client.close();
    return;
  }
  const resource = resourceOf(envelope.resource, definition);
  const deadlineMs = Math.max(1, envelope.deadline_ms - DEADLINE_MARGIN_MS);
  const outcome = await runReconcilePass({ definition, resource, backend: hostBackend(client, pass, envelope.project_dir), deadlineMs });
  for (const entry of outcome.logs) process.stderr.write(`${JSON.stringify(entry)}\n`);
  try {
    await finish(outcome);
  } catch (e) {
    // The host ended the pass first (its deadline, a disabled controller): nothing to commit.
    if (e?.code !== 'claim_lost') throw e;
  }
  await client.close();
}

main().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`${e?.stack ?? e}\n`);
    process.exit(1);
  },
);
