//! Linux backend (Landlock + seccomp). Not yet implemented: nothing here enforces.
