// Types of `piw/builtins`: the built-in workflows, to include (`includeWorkflow(autoplanWorkflow)`)
// or re-export. Their inputs and exits are described in the package README.
import type { Workflow } from '../index.js';

export declare const autoplanWorkflow: Workflow;
export declare const autodocWorkflow: Workflow;
export declare const planApprovalWorkflow: Workflow;
export declare const planChangeWorkflow: Workflow;
/** How long plan-approval's `auto` mode waits for a person before it continues. */
export declare const DEFAULT_AUTO_CONTINUE_MS: number;
/** Implements a chosen plan: checks, review rounds, commit and the pull request's CI. */
export declare const autoimplementWorkflow: Workflow;
/** sanity-check: the change's evidence, read-only reviews in four areas, a verification pass, one verdict. */
export declare const sanityCheckWorkflow: Workflow;
/** monitor: checks a goal on a schedule, waits on durable timers, acts or repairs when allowed. */
export declare const monitorWorkflow: Workflow;
/** Minutes between monitor's checks while work is moving, unless its input says. */
export declare const DEFAULT_EVERY_MINUTES: number;
/** monitor's checks at most, unless its input says. */
export declare const DEFAULT_MAX_CHECKS: number;
