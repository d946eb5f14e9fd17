/**
 * Preloaded (`node --import tests/clock-offset.mjs …`) into a test's child process to put its
 * clock TEST_CLOCK_OFFSET_MS off, as a worker machine's clock may be: Date.now and
 * performance.now both read that much ahead (or behind, when negative).
 */
const offset = Number(process.env.TEST_CLOCK_OFFSET_MS ?? 0);
if (offset !== 0) {
  const dateNow = Date.now.bind(Date);
  Date.now = () => dateNow() + offset;
  const perfNow = performance.now.bind(performance);
  performance.now = () => perfNow() + offset;
}
