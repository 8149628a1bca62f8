-- Expected verdict: WA. ROW_NUMBER() keeps exactly one student per class, so one of the two
-- students tied for the top of 10A (Alice, Bob) is missing.
SELECT class_name, name, total
FROM (
    SELECT s.class_name,
           s.name,
           SUM(e.score) AS total,
           ROW_NUMBER() OVER (PARTITION BY s.class_name ORDER BY SUM(e.score) DESC) AS place
    FROM students s
    JOIN exams e ON e.student_id = s.id
    GROUP BY s.id, s.class_name, s.name
) ranked
WHERE place = 1
ORDER BY class_name, name;
