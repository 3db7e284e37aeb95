//! Dispatch-time permissions, approvals and presets. Not yet implemented.
