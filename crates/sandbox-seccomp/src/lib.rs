//! Policy to seccomp-BPF compiler. Not yet implemented: nothing here enforces.
