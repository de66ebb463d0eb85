// The smallest workflow: one compute node that greets its input. The Node worker runtime that
// executes it lands with the Node addon; the host only hashes this file and never runs it.
export default {
  name: "hello",
  start: "greet",
  nodes: {
    greet: { kind: "compute", run: ({ input }) => ({ greeting: `hello, ${input.name}` }) },
  },
  edges: [],
};
