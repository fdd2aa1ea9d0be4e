#pragma once
/* pyllama90a's own C helpers; their cffi declarations are in decl/native_helpers_decl.h */
void pyllama90a_log_attach(int min_level);
void pyllama90a_log_detach(void);
/* defined by the generated cffi module (extern "Python+C") */
void pyllama90a_on_log(int level, const char * text);
