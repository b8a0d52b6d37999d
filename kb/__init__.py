"""Knowledge base: the causal graph (data + loader + inference) and the incident store."""
