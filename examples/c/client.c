/*
 * A piw client in C: starts a workflow, follows its events and prints the result.
 *
 *   piw-client WORKFLOW_FILE [INPUT_JSON [ANSWER_JSON]]
 *
 * It connects to the installation of $PIW_HOME (starting a host on demand, $PIW_HOST_BIN or
 * `piw` on PATH), subscribes to a session of its own, starts the run in that session (so no
 * event of the run can be missed), waits for events with poll(2) on the subscription's file
 * descriptor, and prints one line per event until the run ends (or stops for review), then
 * the run's record from piw_wait_run. Last, it shows a typed
 * rejection: resuming the finished run is refused with `invalid_transition`. A checkpoint the
 * run waits on is answered with ANSWER_JSON (default `true`); an interactive request of the
 * run (an agent step) is submitted ANSWER_JSON as its result, and when the workflow rejects that
 * submission, {"text": "fixed after rejection"} once more.
 *
 * Output (one fact per line, for people and for the tests):
 *   run RUN_ID
 *   event SEQ EVENT_KIND STATUS
 *   answered DECISION_KIND        (a checkpoint or decision this client answered)
 *   submitted INTERACTION_KIND    (a result this client submitted for an interactive request)
 *   submission_rejected ERROR     (the workflow's validation refused it)
 *   final DATA_JSON               (the data of the event that ended the run)
 *   status STATUS REVISION
 *   result JSON
 *   rejected CODE REJECTION_ENUM MESSAGE
 *
 * Build: cargo build -p piw-ffi --release, then
 *   cc -Iinclude examples/c/client.c -Ltarget/release -lpiw -Wl,-rpath,$PWD/target/release -o piw-client
 */
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "piw.h"

static int fail(const char *what, piw_status status) {
    const char *code = piw_last_error_code();
    const char *message = piw_last_error_message();
    fprintf(stderr, "piw-client: %s failed: %s (%s): %s\n", what, piw_status_name(status),
            code ? code : "-", message ? message : "-");
    return 1;
}

/* The value at `pointer` in `json` (a string's contents, other values as JSON); NULL if none.
 * The caller frees it with piw_string_free. */
static char *field(const char *json, const char *pointer) {
    char *out = NULL;
    if (piw_json_pointer(json, pointer, &out) != PIW_STATUS_OK) return NULL;
    return out;
}

/* Submits `result` for the session's pending interactive request (this client runs one run
 * in its session, so the list holds at most one). */
static int submit(piw_client *client, const char *session, const char *run_id,
                  const char *result) {
    char filter[128], *list = NULL, *reply = NULL;
    snprintf(filter, sizeof filter, "{\"session_id\":\"%s\"}", session);
    piw_status st = piw_client_call(client, "interaction.list", NULL, filter, 30000, &list);
    if (st != PIW_STATUS_OK) return fail("interaction.list", st);
    /* The request's node and attempt go in the envelope (docs/WORKFLOW_SERVER.md). */
    char *node = field(list, "/body/interactions/0/node_id");
    char *attempt = field(list, "/body/interactions/0/attempt_id");
    char *kind = field(list, "/body/interactions/0/kind");
    char *interaction = field(list, "/body/interactions/0/interaction_id");
    piw_string_free(list);
    if (!node || !attempt || !kind || !interaction) {
        fprintf(stderr, "piw-client: no pending interaction to submit to\n");
        return 1;
    }
    size_t n = strlen(run_id) + strlen(node) + strlen(attempt) + strlen(interaction) + strlen(result) + 128;
    char *env = malloc(n), *body = malloc(n);
    snprintf(env, n, "{\"run_id\":\"%s\",\"node_id\":\"%s\",\"attempt_id\":\"%s\"}", run_id, node, attempt);
    snprintf(body, n, "{\"interaction_id\":\"%s\",\"result\":%s}", interaction, result);
    st = piw_client_call(client, "interaction.submit", env, body, 30000, &reply);
    free(env);
    free(body);
    piw_string_free(node);
    piw_string_free(attempt);
    piw_string_free(interaction);
    if (st != PIW_STATUS_OK) {
        piw_string_free(kind);
        return fail("interaction.submit", st);
    }
    printf("submitted %s\n", kind);
    piw_string_free(kind);
    piw_string_free(reply);
    return 0;
}

/* Whether to stop following the run: it ended (libpiw's one list of final states), or it
 * stopped for a person's review, which this client does not do. */
static int stops_here(const char *status) {
    return piw_run_status_is_final(status) || strcmp(status, "review") == 0;
}

/* JSON string escaping of `s` into a new malloc'd string (quotes included). */
static char *json_string(const char *s) {
    size_t n = strlen(s);
    char *out = malloc(n * 6 + 3), *p = out;
    if (!out) return NULL;
    *p++ = '"';
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { *p++ = '\\'; *p++ = (char)c; }
        else if (c < 0x20) p += sprintf(p, "\\u%04x", c);
        else *p++ = (char)c;
    }
    *p++ = '"';
    *p = '\0';
    return out;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s WORKFLOW_FILE [INPUT_JSON]\n", argv[0]);
        return 2;
    }
    const char *input = argc > 2 ? argv[2] : "null";
    const char *answer = argc > 3 ? argv[3] : "true";
    if (PIW_VERSION_MAJOR != 0 || strncmp(piw_version(), "0.", 2) != 0) {
        fprintf(stderr, "piw-client: header and library versions differ (%s)\n", piw_version());
        return 1;
    }
    char workflow[PATH_MAX], cwd[PATH_MAX];
    if (!realpath(argv[1], workflow) || !getcwd(cwd, sizeof cwd)) {
        perror("piw-client");
        return 1;
    }

    piw_client *client = NULL;
    piw_status st = piw_connect(NULL, &client);
    if (st != PIW_STATUS_OK) return fail("connect", st);

    /* A session of our own: subscribed before the run starts, it sees every event. */
    char session[64], filter[128];
    snprintf(session, sizeof session, "c-client-%ld-%ld", (long)getpid(), (long)time(NULL));
    snprintf(filter, sizeof filter, "{\"session_id\":\"%s\"}", session);
    piw_subscription *sub = NULL;
    st = piw_subscribe(client, filter, &sub);
    if (st != PIW_STATUS_OK) return fail("subscribe", st);

    char *wf = json_string(workflow), *dir = json_string(cwd);
    size_t len = strlen(wf) + strlen(dir) + strlen(input) + strlen(session) + 128;
    char *payload = malloc(len);
    snprintf(payload, len,
             "{\"workflow_file\":%s,\"input\":%s,\"session_id\":\"%s\",\"project_dir\":%s}",
             wf, input, session, dir);
    free(wf);
    free(dir);
    char *receipt = NULL;
    st = piw_client_call(client, "run.start", NULL, payload, 30000, &receipt);
    free(payload);
    if (st != PIW_STATUS_OK) return fail("run.start", st);
    char *run_id = field(receipt, "/body/run_id");
    piw_string_free(receipt);
    printf("run %s\n", run_id);
    fflush(stdout);

    int fd = -1;
    st = piw_subscription_fd(sub, &fd);
    if (st != PIW_STATUS_OK) return fail("subscription fd", st);
    int finished = 0;
    while (!finished) {
        /* Wait in poll(2), as an event loop would; the bound is only a guard against a hang. */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int ready = poll(&pfd, 1, 60000);
        if (ready <= 0) {
            fprintf(stderr, "piw-client: no event for 60 s\n");
            return 1;
        }
        char *event = NULL;
        /* The fd is readable, so this does not wait (timeout 0). */
        while ((st = piw_subscription_next(sub, 0, &event)) == PIW_STATUS_OK) {
            char *seq = field(event, "/seq"), *kind = field(event, "/event_kind"),
                 *status = field(event, "/status");
            printf("event %s %s %s\n", seq, kind, status);
            if (strcmp(kind, "waiting") == 0) {
                /* The run waits on a checkpoint (or a person's decision): answer it. */
                char *decision = field(event, "/data/decision"), *what = field(event, "/data/kind");
                size_t n = strlen(decision) + strlen(answer) + 64;
                char *body = malloc(n), *env = malloc(strlen(run_id) + 32), *reply = NULL;
                snprintf(body, n, "{\"decision_id\":\"%s\",\"answer\":%s}", decision, answer);
                snprintf(env, strlen(run_id) + 32, "{\"run_id\":\"%s\"}", run_id);
                const char *call = strcmp(what, "checkpoint") == 0 ? "checkpoint.answer" : "decision.answer";
                st = piw_client_call(client, call, env, body, 30000, &reply);
                if (st != PIW_STATUS_OK) return fail(call, st);
                printf("answered %s\n", what);
                piw_string_free(reply);
                free(body);
                free(env);
                piw_string_free(decision);
                piw_string_free(what);
            }
            if (strcmp(kind, "interaction_requested") == 0 || strcmp(kind, "submission_rejected") == 0) {
                const char *result = answer;
                if (strcmp(kind, "submission_rejected") == 0) {
                    char *error = field(event, "/data/error");
                    printf("submission_rejected %s\n", error ? error : "?");
                    piw_string_free(error);
                    result = "{\"text\":\"fixed after rejection\"}";
                }
                int rc = submit(client, session, run_id, result);
                if (rc != 0) return rc;
            }
            if (stops_here(status)) {
                char *data = field(event, "/data");
                printf("final %s\n", data ? data : "null");
                piw_string_free(data);
                finished = 1;
            }
            piw_string_free(seq);
            piw_string_free(kind);
            piw_string_free(status);
            piw_string_free(event);
        }
        if (st != PIW_STATUS_TIMEOUT) return fail("subscription next", st);
    }
    fflush(stdout);

    char envelope[256];
    snprintf(envelope, sizeof envelope, "{\"run_id\":\"%s\"}", run_id);
    /* The run's record once it ended or parked: returns at once here, as it did. */
    char *run = NULL;
    st = piw_wait_run(client, run_id, PIW_WAIT_UNTIL_PARKED, 30000, &run);
    if (st != PIW_STATUS_OK) return fail("wait run", st);
    char *status = field(run, "/status"), *result = field(run, "/result");
    char *revision = field(run, "/revision");
    printf("status %s %s\nresult %s\n", status ? status : "?", revision ? revision : "?",
           result ? result : "null");
    piw_string_free(status);
    piw_string_free(revision);
    piw_string_free(result);
    piw_string_free(run);

    /* A typed rejection: a finished run cannot be resumed. */
    st = piw_client_call(client, "run.resume", envelope, NULL, 30000, &receipt);
    if (st == PIW_STATUS_REJECTED) {
        printf("rejected %s %d %s\n", piw_last_error_code(), (int)piw_last_rejection_code(),
               piw_last_error_message());
    } else {
        printf("unexpected %s\n", piw_status_name(st));
        piw_string_free(receipt);
    }

    piw_string_free(run_id);
    piw_subscription_close(sub);
    piw_client_close(client);
    /* Stops the library's I/O thread: nothing of libpiw is left when the program ends. */
    piw_shutdown();
    return 0;
}
