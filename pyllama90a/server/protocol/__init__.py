"""What a request may say: a body read as untrusted input, parsed into strict models; the OpenAPI text.

    body: a request body read within limits of size and nesting, strict JSON
    base: `ProtocolModel`, whose one hook sorts a body's fields into known, refused and unknown
    requests: the request bodies of the generation, tokenizer and template routes, each field declared once
    embeddings: the embeddings request, in OpenAI's and llama.cpp's input forms
    rerank: the rerank request, in Jina's and TEI's forms
    chat: a chat's messages, tools and tool_choice: their types for the document, checked by the library
    openai_responses: the Responses API's request, converted onto the chat path
    responses_items: the Responses API's conversation items, checked into one form and read as chat messages
    anthropic: Anthropic's Messages requests, read into the chat route's messages, tools and tool_choice
    refused_fields: fields not implemented here, with the value each may take because it changes nothing
    openapi: the OpenAPI description served at /openapi.json
"""
