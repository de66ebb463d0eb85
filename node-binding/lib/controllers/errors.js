// Errors of the controller API: each is a `ControllerError` whose `code` says what kind of
// mistake it is, so a host can answer each kind alike; the named subclasses are the ones a
// controller author may catch by class.

/** A controller mistake or refusal: `code` is one of `ControllerErrorCode` in controllers.d.ts. */
export class ControllerError extends Error {
  constructor(code, message, options) {
    super(message, options);
    this.name = 'ControllerError';
    this.code = code;
  }
}

/** A write whose `resourceVersion` is not the resource's current one (compare-and-swap lost). */
export class ResourceConflictError extends ControllerError {
  constructor(controller, key, expected, actual) {
    super(
      'resource_conflict',
      `resource ${controller}/${key} changed since it was read (resourceVersion ${actual}, the write expected ${expected}); read it again and retry`,
    );
    this.name = 'ResourceConflictError';
  }
}

/** A resource that is not (or no longer) stored. */
export class ResourceNotFoundError extends ControllerError {
  constructor(controller, key) {
    super('not_found', `no controller resource ${controller}/${key}`);
    this.name = 'ResourceNotFoundError';
  }
}

/** An effect key used again with another request, kind or generation. */
export class EffectRequestConflictError extends ControllerError {
  constructor(key, what = 'request') {
    super(
      'effect_conflict',
      `effect key ${JSON.stringify(key)} was already recorded with another ${what}; an effect key names one request: put what differs (the generation, the head, ...) in the key`,
    );
    this.name = 'EffectRequestConflictError';
  }
}

/** A workflow request key used again with another workflow or input. */
export class WorkflowRequestConflictError extends ControllerError {
  constructor(key, what = 'input') {
    super(
      'workflow_conflict',
      `workflow request key ${JSON.stringify(key)} was already used with another ${what}; a changed input needs a new request key`,
    );
    this.name = 'WorkflowRequestConflictError';
  }
}

/** An error's message, at most 8 KiB: what a record of a failure keeps. */
export function boundedMessage(error) {
  const message = error instanceof Error ? error.message : String(error);
  return message.length <= 8192 ? message : `${message.slice(0, 8192)}…`;
}
