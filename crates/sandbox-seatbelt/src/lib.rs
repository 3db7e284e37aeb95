//! Seatbelt (macOS) profile generator and backend. Not yet implemented: nothing here enforces.
