//! piw-node
