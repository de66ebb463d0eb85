/*
 * A workflow child in C: the runtime for `.workflow.c-demo` files.
 *
 * Register it with the host (the file path is the last argument, the launch envelope arrives
 * on stdin):
 *   PIW_RUNTIMES=".workflow.c-demo=/path/to/piw-c-child" piw host serve
 *
 * A `.workflow.c-demo` file is JSON: {"graph": {name, start, nodes, edges}} (the data-only
 * graph of docs/WORKFLOW_SERVER.md). Every node is a compute node this program implements:
 *   count   input {"text": "..."} -> {"text": ..., "words": N}
 *   report  reserves the managed effect "report" (contract "never"), performs it (nothing to
 *           do here but say so), settles it, sends a workflow message, and outputs
 *           {"summary": "N words"}
 *   echo    outputs its input
 * any other compute node fails the run ("no C implementation for this node"). A node of kind
 * "checkpoint" parks the run on a checkpoint (piw_worker_wait) and the child exits; the child
 * the host starts once it is answered resumes there ("continue") with the output
 * {"answer": ANSWER, "input": NODE_INPUT}. A node of kind "agent" or "assistant_message" asks
 * the run's session for a result (piw_worker_request_interaction) and the child exits; the host
 * then starts a child in validate mode to judge a submission: it accepts a result with a "text"
 * field (piw_worker_validation_result with NULL) and continues the run with it as the node's
 * output, and rejects any other with a reason the session sees.
 *
 * The order every child keeps: read the envelope, verify the sources before loading anything,
 * hello (which opens the first node's attempt), then per node: compute, route by the host's
 * rules, transition (or complete/fail). `PIW_STATUS_STALE` means the run moved on: exit 0.
 *
 * Build: cc -Iinclude examples/c/child.c -Ltarget/release -lpiw -Wl,-rpath,$PWD/target/release -o piw-c-child
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "piw.h"

static piw_worker *worker = NULL;

/* Exits after a failed call: quietly (0) when the run moved on, else with the error. */
static void check(const char *what, piw_status st) {
    if (st == PIW_STATUS_OK) return;
    if (st == PIW_STATUS_STALE) {
        fprintf(stderr, "piw-c-child: the run moved on during %s; stopping\n", what);
        piw_worker_close(worker);
        exit(0);
    }
    fprintf(stderr, "piw-c-child: %s failed: %s (%s): %s\n", what, piw_status_name(st),
            piw_last_error_code(), piw_last_error_message());
    piw_worker_close(worker);
    exit(1);
}

/* The value at `pointer` in `json` as JSON text (strings quoted), malloc'd; NULL if none. */
static char *json_field(const char *json, const char *pointer) {
    char *found = NULL;
    if (piw_json_pointer_json(json, pointer, &found) != PIW_STATUS_OK) return NULL;
    char *copy = strdup(found);
    piw_string_free(found);
    return copy;
}

/* The value at `pointer` in `json` as a malloc'd copy (free it with free), NULL if none. */
static char *field(const char *json, const char *pointer) {
    char *found = NULL;
    if (piw_json_pointer(json, pointer, &found) != PIW_STATUS_OK) return NULL;
    char *copy = strdup(found);
    piw_string_free(found);
    return copy;
}

static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
        free(text);
        text = NULL;
    }
    if (text) text[n] = '\0';
    fclose(f);
    return text;
}

/* sprintf into a new malloc'd string. */
static char *format(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *out = malloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(out, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return out;
}

/* Runs node `node` on `input` (JSON); returns its output (JSON, malloc'd) or NULL with
 * *error set (static text) when the node fails. */
static char *run_node(const char *node, const char *input, const char **error) {
    if (strcmp(node, "count") == 0) {
        char *text = field(input, "/text");
        if (!text) {
            *error = "count needs {\"text\": ...}";
            return NULL;
        }
        long words = 0;
        int in_word = 0;
        for (const char *p = text; *p; p++) {
            int space = *p == ' ' || *p == '\n' || *p == '\t';
            if (!space && !in_word) words++;
            in_word = !space;
        }
        free(text);
        check("progress", piw_worker_progress(worker, "counted", NULL));
        return format("{\"input\":%s,\"words\":%ld}", input, words);
    }
    if (strcmp(node, "report") == 0) {
        char *words = field(input, "/words");
        if (!words) words = field(input, "/input/words"); /* after a checkpoint */
        long n = words ? atol(words) : 0;
        free(words);
        char *reply = NULL;
        check("reserve_effect", piw_worker_reserve_effect(worker, "report", "report-v1", "never", &reply));
        char *reservation = field(reply, "/reservation");
        if (reservation && strcmp(reservation, "reserved") == 0) {
            char *effect_id = field(reply, "/effect_id");
            check("effect_applying", piw_worker_effect_applying(worker, effect_id));
            char *receipt = format("{\"status\":\"applied\",\"receipt\":{\"reported\":%ld}}", n);
            check("settle_effect", piw_worker_settle_effect(worker, effect_id, receipt));
            free(receipt);
            free(effect_id);
        }
        free(reservation);
        piw_string_free(reply);
        char *message = format("{\"text\":\"the text has %ld words\"}", n);
        check("notify", piw_worker_notify(worker, message));
        free(message);
        return format("{\"summary\":\"%ld words\"}", n);
    }
    if (strcmp(node, "echo") == 0) {
        return strdup(input);
    }
    *error = "no C implementation for this node";
    return NULL;
}

int main(int argc, char **argv) {
    (void)argc;
    (void)argv;
    check("open", piw_worker_open_stdin(&worker));
    char *envelope = NULL;
    check("envelope", piw_worker_envelope(worker, &envelope));
    char *source = field(envelope, "/source_root");
    piw_string_free(envelope);

    /* Nothing of the workflow is loaded before its sources are verified. */
    piw_status st = piw_worker_verify_sources(worker);
    if (st == PIW_STATUS_SOURCE_CHANGED) {
        char *reply = NULL;
        check("hello", piw_worker_hello(worker, NULL, NULL, false, &reply));
        piw_string_free(reply);
        check("fail", piw_worker_fail(worker, piw_last_error_message(), true));
        piw_worker_close(worker);
        return 0;
    }
    check("verify_sources", st);

    char *text = read_file(source);
    char *graph = text ? field(text, "/graph") : NULL;
    free(text);
    free(source);

    char *hello = NULL;
    /* A graph that cannot be loaded is still said hello with (NULL), so the host can fail the
     * run with the reason instead of relaunching it. */
    check("hello", piw_worker_hello(worker, graph, NULL, true, &hello));
    char *stop = field(hello, "/stop");
    if (stop && strcmp(stop, "null") != 0) {
        free(stop);
        piw_string_free(hello);
        piw_worker_close(worker);
        return 0;
    }
    free(stop);
    char *node = field(hello, "/resume/node_id");
    char *attempt = field(hello, "/resume/attempt_id");
    char *resume = field(hello, "/resume/resume");
    char *input = json_field(hello, "/node_input");
    if (!node) node = field(hello, "/definition/start");
    /* After an answered checkpoint the run continues at that node with the answer. */
    char *carried = NULL;
    if (resume && strcmp(resume, "continue") == 0) {
        char *answer = json_field(hello, "/answer");
        carried = format("{\"answer\":%s,\"input\":%s}", answer ? answer : "null", input);
        free(answer);
    }
    if (resume && strcmp(resume, "validate") == 0) {
        /* Judge the session's submission with the workflow's own rule. */
        char *submission_id = field(hello, "/submission/submission_id");
        char *payload = json_field(hello, "/submission/payload");
        char *text_value = payload ? field(payload, "/text") : NULL;
        if (text_value) {
            check("validation_result", piw_worker_validation_result(worker, submission_id, NULL));
            carried = strdup(payload);
        } else {
            check("validation_result",
                  piw_worker_validation_result(worker, submission_id, "the result needs a \"text\" field"));
        }
        free(text_value);
        free(payload);
        free(submission_id);
        if (!carried) {
            free(resume);
            free(node);
            free(attempt);
            free(input);
            free(graph);
            piw_string_free(hello);
            piw_worker_close(worker);
            return 0; /* the session may submit again; a new child judges it */
        }
    } else if (resume && strcmp(resume, "accepted") == 0) {
        /* A submission was accepted by a child that ended before it moved on. */
        carried = json_field(hello, "/submission/payload");
    }
    free(resume);
    piw_string_free(hello);
    if (!carried && (!attempt || strcmp(attempt, "null") == 0)) {
        char *opened = NULL;
        check("node_started", piw_worker_node_started(worker, node, &opened));
        piw_string_free(opened);
    }
    free(attempt);

    for (;;) {
        const char *error = NULL;
        char *kind_pointer = format("/nodes/%s/kind", node);
        char *kind = field(graph, kind_pointer);
        free(kind_pointer);
        int checkpoint = kind && strcmp(kind, "checkpoint") == 0;
        int interactive = kind && (strcmp(kind, "agent") == 0 || strcmp(kind, "assistant_message") == 0);
        if (checkpoint && !carried) {
            char *decision = NULL;
            check("wait", piw_worker_wait(worker, "checkpoint", "{\"question\":\"go on?\"}", &decision));
            piw_string_free(decision);
            free(kind);
            break; /* a new child continues once it is answered */
        }
        if (interactive && !carried) {
            char *interaction = NULL;
            check("request_interaction",
                  piw_worker_request_interaction(worker, kind, "{\"prompt\":\"write a sentence\"}", &interaction));
            piw_string_free(interaction);
            free(kind);
            break; /* a child in validate mode judges the session's submission */
        }
        free(kind);
        char *output = carried ? carried : run_node(node, input, &error);
        carried = NULL;
        char *outcome;
        if (output) {
            outcome = format("{\"status\":\"succeeded\",\"output\":%s}", output);
        } else {
            outcome = format("{\"status\":\"failed\",\"error\":\"%s\"}", error);
        }
        char *route = NULL;
        check("route", piw_worker_route(worker, node, outcome, &route));
        char *next = field(route, "/next");
        char *complete = field(route, "/complete");
        char *failure = field(route, "/fail");
        piw_string_free(route);
        if (next) {
            char *reply = NULL;
            check("transition", piw_worker_transition(worker, outcome, next, &reply));
            char *parked = field(reply, "/parked");
            int done = parked && strcmp(parked, "true") == 0;
            free(parked);
            piw_string_free(reply);
            free(node);
            node = next;
            free(input);
            input = output ? output : strdup("null");
            free(outcome);
            free(complete);
            free(failure);
            if (done) break;
            continue;
        }
        if (complete) {
            check("complete", piw_worker_complete(worker, outcome, output));
        } else {
            check("fail", piw_worker_fail(worker, failure ? failure : "failed", false));
        }
        free(output);
        free(outcome);
        free(complete);
        free(failure);
        break;
    }
    free(node);
    free(input);
    free(graph);
    piw_worker_close(worker);
    return 0;
}
