#include "native_helpers.h"

#include "ggml.h"
#include "llama.h"

static int g_min_level = GGML_LOG_LEVEL_WARN;
static int g_last_level = GGML_LOG_LEVEL_INFO;

static void log_forward(enum ggml_log_level level, const char * text, void * user_data) {
    (void) user_data;
    /* CONT lines continue the previous message and share its level */
    int effective = level == GGML_LOG_LEVEL_CONT ? g_last_level : (int) level;
    g_last_level = effective;
    if (effective >= g_min_level) {
        pyllama90a_on_log(effective, text);
    }
}

static void log_drop(enum ggml_log_level level, const char * text, void * user_data) {
    (void) level; (void) text; (void) user_data;
}

void pyllama90a_log_attach(int min_level) {
    g_min_level = min_level;
    llama_log_set(log_forward, NULL);
}

void pyllama90a_log_detach(void) {
    llama_log_set(log_drop, NULL);
}
