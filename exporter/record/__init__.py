"""Recording what each cycle saw, and replaying it under another configuration (what-if)."""
