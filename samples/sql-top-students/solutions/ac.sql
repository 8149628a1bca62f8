-- Expected verdict: AC. A different formulation from the reference (CTE + per-class maximum
-- instead of a window function) that yields the same rows in the same order.
WITH totals AS (
    SELECT s.id, s.class_name, s.name, SUM(e.score) AS total
    FROM students s
    JOIN exams e ON e.student_id = s.id
    GROUP BY s.id, s.class_name, s.name
)
SELECT t.class_name, t.name, t.total
FROM totals t
JOIN (SELECT class_name, MAX(total) AS best FROM totals GROUP BY class_name) b
  ON b.class_name = t.class_name AND b.best = t.total
ORDER BY t.class_name, t.name;
