/*
 * A CPU-only "training loop" marked with NVTX ranges, recorded by the export
 * tests with `nsys profile --trace=nvtx,osrt` (no GPU needed).
 *
 * On the main thread it pushes ten ranges "Iteration 0" .. "Iteration 9"; each
 * holds one nested "forward" and one nested "backward" range that spin the CPU
 * (busy loop, no sleep, so the durations are wall-clock CPU time):
 *   - a normal iteration takes about BASE_MS (50 ms: forward 20 ms, backward 30 ms; long enough
 *     that a few ms of scheduling delay on a busy 2-CPU machine stay well inside the tolerances);
 *   - iteration 0 is a slow warm-up, about 3x;
 *   - iteration CHECKPOINT_ITER (6) is a slow checkpoint iteration, about 5x
 *     (its extra time is a nested "checkpoint" range after backward).
 * The ranges spin on the wall clock, so a busy machine that preempts the app stretches a range now
 * and then: the planted durations are what the app asks for, not what it gets. So the app also
 * records, for every push and pop, CLOCK_MONOTONIC just before and just after the NVTX call, and
 * writes them (one line per range: name, before push, after push, before pop, after pop, in ns) to
 * the file named by its first argument. The tests compare the export with these records, never
 * with the planted figures.
 *
 * Build: gcc -O1 -I<nsys>/target-linux-x64/nvtx/include app.c -o app -ldl
 * (NVTX3 is header-only; it dlopens the injection library nsys provides.)
 */
#include <stdio.h>
#include <time.h>
#include <nvtx3/nvToolsExt.h>

#define ITERATIONS 10
#define BASE_MS 50.0
#define FORWARD_SHARE 0.4
#define WARMUP_FACTOR 3.0
#define CHECKPOINT_ITER 6
#define CHECKPOINT_FACTOR 5.0

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static long long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* What the app saw of each range: CLOCK_MONOTONIC around its push and around its pop. */
#define MAX_RANGES 64
struct seen { char name[32]; long long before_push, after_push, before_pop, after_pop; };
static struct seen seen[MAX_RANGES];
static int open_ranges[8], depth, count;

static void push(const char *name)
{
    struct seen *r = &seen[count];
    snprintf(r->name, sizeof r->name, "%s", name);
    r->before_push = now_ns();
    nvtxRangePushA(name);
    r->after_push = now_ns();
    open_ranges[depth++] = count++;
}

static void pop(void)
{
    struct seen *r = &seen[open_ranges[--depth]];
    r->before_pop = now_ns();
    nvtxRangePop();
    r->after_pop = now_ns();
}

/* Spin for `ms` milliseconds of wall-clock time. */
static volatile unsigned long sink;
static void busy(double ms)
{
    double end = now_ms() + ms;
    unsigned long x = 0;
    while (now_ms() < end)
        for (int i = 0; i < 1000; ++i)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    sink = x;
}

int main(int argc, char **argv)
{
    char name[32];
    /* Load nsys's injection library now: otherwise the first NVTX call (inside "Iteration 0") loads it, and
     * on a busy machine that adds tens of ms to the warm-up the test compares with its planted 3x. */
    nvtxInitialize(NULL);
    for (int it = 0; it < ITERATIONS; ++it) {
        double factor = it == 0 ? WARMUP_FACTOR : 1.0;
        snprintf(name, sizeof name, "Iteration %d", it);
        push(name);

        push("forward");
        busy(BASE_MS * FORWARD_SHARE * factor);
        pop();

        push("backward");
        busy(BASE_MS * (1.0 - FORWARD_SHARE) * factor);
        pop();

        if (it == CHECKPOINT_ITER) {
            push("checkpoint");
            busy(BASE_MS * (CHECKPOINT_FACTOR - 1.0));
            pop();
        }
        pop();
    }
    if (argc > 1) {
        FILE *out = fopen(argv[1], "w");
        if (!out) {
            perror(argv[1]);
            return 1;
        }
        for (int i = 0; i < count; ++i)
            fprintf(out, "%s\t%lld\t%lld\t%lld\t%lld\n", seen[i].name, seen[i].before_push,
                    seen[i].after_push, seen[i].before_pop, seen[i].after_pop);
        fclose(out);
    }
    printf("nvtx_app: %d iterations done\n", ITERATIONS);
    return 0;
}
