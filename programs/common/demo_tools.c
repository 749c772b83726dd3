/*
 * demo_tools.c - the demo tools:
 *   echo   {text}          returns the text
 *   stream {n, delay_ms?}  sends n progress notifications, then returns
 */
#include "demo_tools.h"
#include <stdio.h>
#include <time.h>

static int tool_echo(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)call;
    (void)ud;
    json_t *text = json_object_get(args, "text");
    if (!json_is_string(text)) {
        *result = tidemark_result_error("argument 'text' (string) is required");
        return 0;
    }
    *result = tidemark_result_text(json_string_value(text));
    return 0;
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static int tool_stream(tidemark_call_t *call, json_t *args, json_t **result, void *ud)
{
    (void)ud;
    json_t *jn = json_object_get(args, "n");
    json_t *jd = json_object_get(args, "delay_ms");
    if (!json_is_integer(jn) || json_integer_value(jn) < 0 || json_integer_value(jn) > 1000000 ||
        (jd && (!json_is_integer(jd) || json_integer_value(jd) < 0 ||
                json_integer_value(jd) > 60000))) {
        *result = tidemark_result_error("arguments: n (integer 0..1000000), delay_ms (0..60000)");
        return 0;
    }
    long n = (long)json_integer_value(jn), delay = jd ? (long)json_integer_value(jd) : 0;
    for (long i = 1; i <= n; i++) {
        if (tidemark_call_cancelled(call))
            return TIDEMARK_ECANCELED;
        if (delay)
            sleep_ms(delay);
        tidemark_call_progress(call, (double)i, (double)n, NULL);
    }
    char text[64];
    snprintf(text, sizeof text, "streamed %ld", n);
    *result = tidemark_result_text(text);
    return 0;
}

int demo_tools_register(tidemark_server_t *srv)
{
    const tidemark_tool_t echo = {
        .name = "echo",
        .description = "Returns its text argument as text content.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\"}},"
                        "\"required\":[\"text\"]}",
        .hints = TIDEMARK_TOOL_READ_ONLY | TIDEMARK_TOOL_IDEMPOTENT,
        .fn = tool_echo,
    };
    const tidemark_tool_t stream = {
        .name = "stream",
        .description = "Sends n progress notifications (delay_ms apart), then returns.",
        .input_schema = "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
                        "\"minimum\":0},\"delay_ms\":{\"type\":\"integer\",\"minimum\":0}},"
                        "\"required\":[\"n\"]}",
        .hints = TIDEMARK_TOOL_READ_ONLY | TIDEMARK_TOOL_IDEMPOTENT,
        .fn = tool_stream,
    };
    int rc = tidemark_server_add_tool(srv, &echo);
    return rc ? rc : tidemark_server_add_tool(srv, &stream);
}
