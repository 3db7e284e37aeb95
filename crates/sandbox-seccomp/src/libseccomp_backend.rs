//! The same specification compiled with libseccomp (feature `libseccomp`).
