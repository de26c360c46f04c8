"""Pure analysis: frames in, a typed Report out (windows, correlation, verdict, advice)."""
