/* BE memory-bandwidth streamer: copies a 128 MB buffer back and forth forever. */
#include <stdlib.h>
#include <string.h>

int main(void) {
    size_t size = 128u << 20;
    char *a = malloc(size), *b = malloc(size);
    if (a == NULL || b == NULL) return 1;
    memset(a, 1, size);
    memset(b, 2, size);
    for (;;) {
        memcpy(b, a, size);
        memcpy(a, b, size);
    }
}
