// The built-in workflows as modules: `import { autoplanWorkflow } from 'piw/builtins'` (or
// '@osolmaz/pi-workflows/builtins' in a workflow file) to include or re-export one. Each is
// also addressable as `builtin:<id>` (see lib/workflow-names.js).
export { default as autoplanWorkflow } from './autoplan.workflow.mjs';
export { default as autodocWorkflow } from './autodoc.workflow.mjs';
export { default as planApprovalWorkflow, DEFAULT_AUTO_CONTINUE_MS } from './plan-approval.workflow.mjs';
export { default as planChangeWorkflow } from './plan-change.workflow.mjs';
export { default as autoimplementWorkflow } from './autoimplement.workflow.mjs';
export { default as sanityCheckWorkflow } from './sanity-check.workflow.mjs';
export { default as monitorWorkflow, DEFAULT_EVERY_MINUTES, DEFAULT_MAX_CHECKS } from './monitor.workflow.mjs';
