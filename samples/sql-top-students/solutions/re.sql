-- Expected verdict: RE. Syntactically valid, but the column `points` does not exist
-- (error 1054, unknown column): the statement parses and then fails.
SELECT s.class_name, s.name, SUM(e.points) AS total
FROM students s
JOIN exams e ON e.student_id = s.id
GROUP BY s.id, s.class_name, s.name
ORDER BY s.class_name, s.name;
