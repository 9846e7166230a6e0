"""Strict local fakes of the LLM APIs the researchers speak, for driving the real SDKs.

`server.FakeServer` is the HTTP side (a thread on 127.0.0.1 playing a script, recording every
request); `anthropic_api.FakeAnthropic` validates Messages requests the way the real API does
and simulates its prompt cache; `openai_api.FakeOpenAI` does the same for Chat Completions.
`agent_models` streams (server-sent events) a scripted agent's steps to the real coding-agent
CLIs: `FakeClaudeCodeModel` (Messages, for Claude Code), `FakeCodexModel` (Responses, for Codex).
A request the real API would refuse is answered 400 in the API's error shape and listed in
`fake.rejections`, so a test asserts `fake.rejections == []` to say "no 400 was sent".
"""
