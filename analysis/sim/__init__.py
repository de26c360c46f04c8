"""A discrete-event model of vLLM's V1 scheduler: demo data, ground truth and what-if."""
