"""What a request may say: a body read as untrusted input, parsed into strict models; the OpenAPI text.

    body: a request body read within limits of size and nesting, strict JSON
    base: `ProtocolModel`, whose one hook sorts a body's fields into known, refused and unknown
    requests: the request bodies of every route, each field declared once
    rerank: the rerank request, in Jina's and TEI's forms
    chat: a chat's messages, tools and tool_choice: their types for the document, checked by the library
    refused_fields: fields not implemented here, with the value each may take because it changes nothing
    openapi: the OpenAPI description served at /openapi.json
"""
