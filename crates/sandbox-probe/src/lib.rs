//! Enforcement self-test and conformance arms. Not yet implemented.
