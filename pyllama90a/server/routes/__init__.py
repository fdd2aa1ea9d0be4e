"""The routes, by API family.

    llama_server: llama-server's native routes (/completion, /infill, /tokenize, /props, /slots, ...)
    lora: llama-server's /lora-adapters
    slots: llama-server's POST /slots/{id}?action=save|restore|erase
"""
