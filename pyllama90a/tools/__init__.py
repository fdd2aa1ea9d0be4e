"""Tools that drive a pyllama90a (or llama.cpp) server from outside: starting one in a child process and the
malformed-request campaign. Used by the server load bench, the campaign's command line and the tests; nothing in
pyllama90a.server (what a deployment runs) imports them."""
