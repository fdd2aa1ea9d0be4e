/* pyllama90a's own C helpers (src/native_helpers.c). */

/* llama.cpp/ggml log lines at or above min_level go to the Python callback below; the rest are dropped
   in C so quiet logging costs no Python call. detach restores silence (used at interpreter exit). */
void pyllama90a_log_attach(int min_level);
void pyllama90a_log_detach(void);
extern "Python+C" void pyllama90a_on_log(int level, const char * text);
