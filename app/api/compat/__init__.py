"""Drop-in facades: OpenAI Chat Completions and Anthropic Messages on the gateway's pipeline.

A facade speaks a client's wire format: it converts the client's request into the canonical
RunSpec (the one /v1/stream builds), opens the run through the same Gateway, and translates the
released canonical events into the client's shapes. It never knows a provider's wire format.
"""
