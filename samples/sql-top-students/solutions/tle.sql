-- Expected verdict: TLE. The right query, but SLEEP(3) runs for every candidate row
-- (4 rows: at least 12 seconds). SLEEP is only part of the query, so when the server or the
-- judge interrupts it, the statement fails with a timeout/interrupted error instead of
-- quietly returning rows.
SELECT class_name, name, total
FROM (
    SELECT s.class_name,
           s.name,
           SUM(e.score) AS total,
           RANK() OVER (PARTITION BY s.class_name ORDER BY SUM(e.score) DESC) AS place
    FROM students s
    JOIN exams e ON e.student_id = s.id
    GROUP BY s.id, s.class_name, s.name
) ranked
WHERE place = 1 AND SLEEP(3) = 0
ORDER BY class_name, name;
