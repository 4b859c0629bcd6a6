"""planner.capacity: the LLM capacity arithmetic of the seeds, each formula once."""
