"""Chat requests: messages rendered by the model's Jinja template, and the generated text read back.

    messages: `ChatMessage`, `Messages`: a request's messages in one typed form, checked once where they enter
    template: `ChatTemplate`, Jinja chat templates rendered as Hugging Face transformers renders them
    render: templates compiled and rendered in a worker process, within time, memory and output limits
    prepare: a chat request made ready to generate (messages, tools, constraint) and its output read back
    tool_output: `ToolCallOutput`, a chat's generated text read for the tool calls it offered
    reasoning: a thinking block read into reasoning_content (reasoning_format), and its budget's defaults
    held_tokens: `HeldTokens`, the tokens and logprobs of text those two readers hold back
"""
